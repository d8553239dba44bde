"""Time one LSTM training step (forward and backward over a sequence) in each dropout mode.

Every mode runs the same Python loop over time (:mod:`unstall.sparse.lstm.kernels`), so the
ratio ``standard / structured`` isolates what skipping the dropped units buys. ``nn.LSTM`` (the
fused oneDNN/cuDNN kernel, which cannot skip units; no dropout for one layer) is timed for
reference.

Modes are timed round-robin, one step each per round, so that load from other processes falls
on all of them alike; ``step_s`` is the fastest round (the least disturbed one) and
``step_s_median`` the median.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from unstall.config import check, check_non_negative, check_positive
from unstall.results import JsonResult
from unstall.sparse.lstm.dropout_lstm import StructuredDropoutLSTM
from unstall.sparse.lstm.masks import (
    DROPOUT_MODES,
    check_device,
    check_dropout,
    check_mask_source,
)
from unstall.sparse.lstm.streams import use_streams

NN_LSTM = "nn.LSTM"


@dataclass(frozen=True, kw_only=True)
class LSTMBenchConfig:
    """Sizes, dropout and repetitions of the per-step benchmark."""

    hidden: int = 1024
    batch: int = 64
    p: float = 0.5
    seq_len: int = 35
    input_size: int | None = None  # None: same as hidden
    num_layers: int = 1
    modes: tuple[str, ...] = DROPOUT_MODES
    with_nn_lstm: bool = True
    repeats: int = 5
    warmup: int = 1
    threads: int | None = None  # torch.set_num_threads; None leaves torch's default
    # Structured modes: two single-threaded streams per layer (StructuredDropoutLSTM's pipeline);
    # None: where that measured faster (unstall.sparse.lstm.streams.use_streams).
    pipeline: bool | None = None
    device: str = "cpu"
    # On a GPU, where standard and locked draw their masks (sparse.lstm.masks.MASK_SOURCES):
    # "device", the fair baseline there (nn.Dropout's way); "cpu", the same masks as on a CPU.
    mask_source: str = "device"
    seed: int = 0

    def __post_init__(self) -> None:
        check_positive(
            self,
            hidden=self.hidden,
            batch=self.batch,
            seq_len=self.seq_len,
            num_layers=self.num_layers,
            repeats=self.repeats,
        )
        check_non_negative(self, warmup=self.warmup)
        check_dropout(self, "p", self.p)
        check(self.input_size is None or self.input_size > 0, self, "input_size", "must be > 0")
        check(self.threads is None or self.threads > 0, self, "threads", "must be > 0")
        check_device(self, "device", self.device)
        check_mask_source(self, "mask_source", self.mask_source)
        check(len(self.modes) > 0, self, "modes", "name at least one mode")
        for mode in self.modes:
            check(mode in DROPOUT_MODES, self, "modes", f"unknown mode {mode!r}")

    @property
    def width(self) -> int:
        return self.input_size if self.input_size is not None else self.hidden

    @property
    def timed_steps(self) -> int:
        """Training steps the benchmark times: ``repeats`` rounds of every mode (and nn.LSTM)."""
        return self.repeats * (len(self.modes) + int(self.with_nn_lstm))


@dataclass(frozen=True, kw_only=True)
class LSTMBenchResult(JsonResult):
    """Seconds per training step by mode (and nn.LSTM), and the speedups that matter."""

    hidden: int
    batch: int
    p: float
    seq_len: int
    num_layers: int
    device: str
    mask_source: str = "cpu"
    threads: int
    pipelined: bool  # whether the structured layers ran as two single-threaded streams
    step_s: dict[str, float]
    step_s_median: dict[str, float]
    samples_s: dict[str, list[float]] = field(repr=False)
    speedup_structured_vs_standard: float | None
    speedup_window_vs_standard: float | None
    speedup_structured_vs_nn_lstm: float | None
    speedup_window_vs_nn_lstm: float | None


def _ratio(step_s: dict[str, float], slow: str, fast: str) -> float | None:
    if slow in step_s and fast in step_s and step_s[fast] > 0:
        return step_s[slow] / step_s[fast]
    return None


def _build(config: LSTMBenchConfig, device: torch.device) -> dict[str, nn.Module]:
    """One model per mode with identical weights; nn.LSTM last."""
    models: dict[str, nn.Module] = {}
    for i, mode in enumerate(config.modes):
        gen = torch.Generator().manual_seed(config.seed + i)
        models[mode] = StructuredDropoutLSTM(
            config.width,
            config.hidden,
            config.num_layers,
            dropout=config.p,
            mode=mode,
            pipeline=config.pipeline,
            mask_source=config.mask_source,
            generator=gen,
        ).to(device)
    if config.with_nn_lstm:
        ref = nn.LSTM(config.width, config.hidden, config.num_layers).to(device)
        first = next(iter(models.values()))
        ref.load_state_dict(first.state_dict())
        models[NN_LSTM] = ref
    return models


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _step(model: nn.Module, x: Tensor, grad_out: Tensor, device: torch.device) -> float:
    """Seconds of one forward and backward pass (gradients cleared first, outside the clock)."""
    model.zero_grad(set_to_none=True)
    x.grad = None
    _sync(device)
    start = time.perf_counter()
    out, _ = model(x)
    out.backward(grad_out)
    _sync(device)
    return time.perf_counter() - start


def bench_lstm_step(
    config: LSTMBenchConfig, advance: Callable[[int], None] | None = None
) -> LSTMBenchResult:
    """Time ``config.repeats`` rounds of one step per mode; ``advance(1)`` after each step."""
    if config.threads is not None:
        torch.set_num_threads(config.threads)
    device = torch.device(config.device)
    gen = torch.Generator().manual_seed(config.seed)
    shape = (config.seq_len, config.batch)
    x = torch.randn(*shape, config.width, generator=gen).to(device).requires_grad_()
    grad_out = torch.randn(*shape, config.hidden, generator=gen).to(device)
    models = _build(config, device)
    for model in models.values():
        for _ in range(config.warmup):
            _step(model, x, grad_out, device)
    samples: dict[str, list[float]] = {name: [] for name in models}
    for _ in range(config.repeats):
        for name, model in models.items():
            samples[name].append(_step(model, x, grad_out, device))
            if advance is not None:
                advance(1)
    best = {name: min(s) for name, s in samples.items()}
    return LSTMBenchResult(
        hidden=config.hidden,
        batch=config.batch,
        p=config.p,
        seq_len=config.seq_len,
        num_layers=config.num_layers,
        device=str(device),
        mask_source=config.mask_source,
        threads=torch.get_num_threads(),
        pipelined=use_streams(config.pipeline, device, config.hidden),
        step_s=best,
        step_s_median={name: statistics.median(s) for name, s in samples.items()},
        samples_s=samples,
        speedup_structured_vs_standard=_ratio(best, "standard", "structured"),
        speedup_window_vs_standard=_ratio(best, "standard", "structured-window"),
        speedup_structured_vs_nn_lstm=_ratio(best, NN_LSTM, "structured"),
        speedup_window_vs_nn_lstm=_ratio(best, NN_LSTM, "structured-window"),
    )
