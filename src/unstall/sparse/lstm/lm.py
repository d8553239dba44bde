"""Word-level language model on Penn Treebank with a :class:`StructuredDropoutLSTM`.

Data: :mod:`unstall.sparse.lstm.ptb` (a :class:`~unstall.sparse.lstm.ptb.Corpus`; the caller
loads it, :func:`train_lm` reads no file).

Model (Zaremba et al. 2014 layout): embedding -> LSTM (dropout on every layer's input and on the
recurrent state, per the mode) -> dropout -> linear decoder over the vocabulary. In the structured
modes the decoder's input dropout is structured too, so the decoder product shrinks like the gate
products; ``decoder_mask_steps`` (and ``input_mask_steps`` for the layer inputs) hold one set for
that many steps, so these connections become a few large products on the kept units instead of
one small product and one weight gather per step (see :class:`LMConfig`).

Training: truncated BPTT over contiguous batch streams, SGD with gradient clipping, the learning
rate divided by 4 whenever validation loss does not improve (the PyTorch example recipe).
"""

from __future__ import annotations

import math
import pickle
import time
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
from torch import Tensor, nn

from unstall.config import check, check_positive
from unstall.errors import DataFileError, unreadable_checkpoint_reason
from unstall.results import JsonResult, replaced_atomically
from unstall.sparse.lstm.dropout_lstm import StructuredDropoutLSTM
from unstall.sparse.lstm.kernels import OutputMemory, masked_linear
from unstall.sparse.lstm.masks import (
    MaskGenerators,
    check_device,
    check_dropout,
    check_mask_source,
    check_mode,
    mask_to,
    sample_mask,
)
from unstall.sparse.lstm.ptb import Corpus, batchify, bptt_batches


@dataclass(frozen=True, kw_only=True)
class LMConfig:
    """One language-model training run."""

    mode: str = "structured"
    p: float = 0.5
    hidden: int = 650
    layers: int = 2
    bptt: int = 35
    batch: int = 20
    eval_batch: int = 10
    lr: float = 20.0
    clip: float = 0.25
    epochs: int = 1
    max_batches: int | None = None  # per epoch; None = the whole training split
    max_eval_batches: int | None = None  # per evaluation; None = the whole split
    seed: int = 0
    threads: int | None = None  # CPU threads (torch.set_num_threads); None: torch's default
    device: str = "cpu"  # where the model trains: cpu, cuda, cuda:N
    # Structured modes: steps that share one dropout set on each LSTM layer's input and on the
    # decoder's input (1: fresh every step; the recurrent set is always fresh every step).
    input_mask_steps: int = 1
    decoder_mask_steps: int = 1
    # Structured modes on a CPU: each LSTM layer as two single-threaded streams (see
    # StructuredDropoutLSTM); None: where that has measured faster (unstall.sparse.lstm.streams).
    pipeline: bool | None = None
    # Structured modes on a CPU: the decoder's column tiles shared out between two
    # single-threaded streams (masked_linear's split); None: where that has measured faster.
    decoder_split: bool | None = None
    # On a GPU, where the elementwise modes (standard, locked) draw their masks: "device" (as
    # nn.Dropout, and much faster there) or "cpu" (the same masks as on any device); see
    # unstall.sparse.lstm.masks.MASK_SOURCES. The structured modes draw on the CPU either way.
    mask_source: str = "device"

    def __post_init__(self) -> None:
        check_mode(self, "mode", self.mode)
        check_mask_source(self, "mask_source", self.mask_source)
        check_dropout(self, "p", self.p)
        check_positive(
            self,
            hidden=self.hidden,
            layers=self.layers,
            bptt=self.bptt,
            batch=self.batch,
            eval_batch=self.eval_batch,
            lr=self.lr,
            clip=self.clip,
            epochs=self.epochs,
            input_mask_steps=self.input_mask_steps,
            decoder_mask_steps=self.decoder_mask_steps,
        )
        for name in ("max_batches", "max_eval_batches"):
            value = getattr(self, name)
            check(value is None or value > 0, self, name, f"must be > 0, got {value!r}")
        check(self.threads is None or self.threads > 0, self, "threads", "must be > 0")
        check_device(self, "device", self.device)


def named_generator(seed: int, name: str) -> torch.Generator:
    """A generator for one purpose of a run, derived from the run's seed and the purpose's name."""
    return torch.Generator().manual_seed((seed * 1_000_003 + zlib.crc32(name.encode())) % 2**63)


class WordLM(nn.Module):
    """Embedding -> StructuredDropoutLSTM -> dropout -> decoder, dropout in one mode throughout."""

    def __init__(self, vocab: int, config: LMConfig) -> None:
        super().__init__()
        hid = config.hidden
        self.mode, self.p = config.mode, config.p
        self.decoder_mask_steps = config.decoder_mask_steps
        self.decoder_split = config.decoder_split
        self.mask_gen = named_generator(config.seed, "output-dropout")
        self.mask_generators = MaskGenerators(config.mask_source)
        self.embed = nn.Embedding(vocab, hid)
        self.lstm = StructuredDropoutLSTM(
            hid,
            hid,
            config.layers,
            dropout=config.p,
            mode=config.mode,
            input_mask_steps=config.input_mask_steps,
            pipeline=config.pipeline,
            mask_source=config.mask_source,
            generator=named_generator(config.seed, "lstm-dropout"),
        )
        self.decoder = nn.Linear(hid, vocab)
        init = named_generator(config.seed, "init")
        self.lstm.reset_parameters(init)
        for weight in (self.embed.weight, self.decoder.weight):
            nn.init.uniform_(weight, -0.1, 0.1, generator=init)
        nn.init.zeros_(self.decoder.bias)

    def forward(
        self,
        tokens: Tensor,
        state: tuple[Tensor, Tensor] | None = None,
        logits_memory: OutputMemory | None = None,
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """(T, B) token ids -> (T, B, vocab) logits and the final LSTM state; the logits are
        written into ``logits_memory`` when given (see :class:`OutputMemory`: the next call with
        the same memory overwrites them)."""
        out, state = self.lstm(self.embed(tokens), state)
        mask = None
        if self.training:
            steps, batch, hid = out.shape
            gen = self.mask_generators.for_draw(self.mask_gen, self.mode, out.device)
            mask = sample_mask(self.mode, steps, batch, hid, self.p, gen, self.decoder_mask_steps)
            mask = mask_to(mask, out.device, out.dtype)
        logits = masked_linear(
            out, self.decoder.weight, self.decoder.bias, mask, self.decoder_split, logits_memory
        )
        return logits, state


@dataclass(frozen=True, kw_only=True)
class EpochRecord:
    """One epoch: training time and throughput, perplexities, the learning rate it used."""

    epoch: int
    train_s: float
    tokens_per_s: float
    train_ppl: float
    valid_ppl: float
    lr: float


@dataclass(frozen=True, kw_only=True)
class LMTrainResult(JsonResult):
    """A training run: per-epoch records, the final test perplexity, sizes for context."""

    mode: str
    p: float
    hidden: int
    layers: int
    batch: int
    bptt: int
    vocab: int
    train_tokens: int
    threads: int
    device: str = "cpu"
    mask_source: str = "cpu"
    epochs: list[EpochRecord] = field(default_factory=list)
    test_ppl: float = math.nan

    @property
    def train_s_per_epoch(self) -> float:
        return sum(e.train_s for e in self.epochs) / max(1, len(self.epochs))

    @property
    def final_valid_ppl(self) -> float:
        return self.epochs[-1].valid_ppl if self.epochs else math.nan


def _detach(state: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
    return state[0].detach(), state[1].detach()


def evaluate(model: WordLM, data: Tensor, bptt: int, max_batches: int | None = None) -> float:
    """Perplexity of ``data`` (already batchified), no dropout; the first ``max_batches`` only."""
    model.eval()
    total, count = 0.0, 0
    state = None
    with torch.no_grad():
        for n, (inputs, targets) in enumerate(bptt_batches(data, bptt)):
            if max_batches is not None and n >= max_batches:
                break
            logits, state = model(inputs, state)
            loss = nn.functional.cross_entropy(
                logits.view(-1, logits.shape[-1]), targets.reshape(-1), reduction="sum"
            )
            total += float(loss)
            count += targets.numel()
    return math.exp(total / count)


# Rows of logits the loss works on at once (a chunk of ~4 MB at a 10k vocabulary): small enough
# that each chunk's passes after the first read it from cache.
LOSS_CHUNK_BYTES = 4 << 20


def cross_entropy_grad_(logits: Tensor, targets: Tensor) -> Tensor:
    """Mean cross entropy of (N, V) ``logits`` against (N,) ``targets``, and its gradient.

    Returns the loss (a 0-d tensor) and overwrites ``logits`` with the gradient of that loss with
    respect to them, ``(softmax(logits) - onehot(targets)) / N``: the values of
    ``F.cross_entropy`` and of its backward, within float rounding. The logits are consumed in
    row chunks of :data:`LOSS_CHUNK_BYTES` (the log-softmax over the vocabulary is never
    written out): each chunk is read once from memory, and its gradient is written in place.
    """
    rows, vocab = logits.shape
    check(logits.is_contiguous(), "cross_entropy_grad_", "logits", "must be contiguous")
    picked = logits.gather(1, targets.view(-1, 1)).view(-1)  # before they become gradients
    lse = logits.new_empty(rows)
    step = rows
    if logits.device.type == "cpu":
        step = max(1, LOSS_CHUNK_BYTES // (vocab * logits.element_size()))
    for start in range(0, rows, step):
        chunk = logits[start : start + step]
        top = chunk.amax(1, keepdim=True)
        total = chunk.sub_(top).exp_().sum(1, keepdim=True)  # chunk: exp(x - max)
        torch.add(top, total.log(), out=lse[start : start + step].view(-1, 1))
        chunk.mul_(total.reciprocal_().mul_(1.0 / rows))  # softmax / N
    flat = torch.arange(rows, device=logits.device) * vocab + targets.view(-1)
    logits.view(-1).index_add_(0, flat, logits.new_full((rows,), -1.0 / rows))
    return (lse - picked).mean()


def train_step_loss(logits: Tensor, targets: Tensor) -> Tensor:
    """Backpropagate the mean cross entropy of a batch's (T, B, V) ``logits`` (the graph's output)
    against (T, B) ``targets``; returns the loss (detached).

    The same loss and gradients as ``F.cross_entropy(...).backward()``, within float rounding, at a
    fraction of the cost: the gradient is computed into the logits' own memory
    (:func:`cross_entropy_grad_`), which nothing in the graph reads in backward (the decoder's
    backward needs its input and weight, not its output), so the logits are consumed.

    The gradient is written through an alias of the logits' memory with a version counter of its
    own: written through ``logits.detach()``, it would mark the logits as modified in place, and
    autograd would then route the gradient of a logits tensor that is a view (the dense decoder's
    output) through a generic as-strided backward, which zero-fills and copies a full-size
    gradient.
    """
    with torch.no_grad():
        grad = logits.new_empty(0).set_(
            logits.untyped_storage(), logits.storage_offset(), logits.shape, logits.stride()
        )
        loss = cross_entropy_grad_(grad.view(-1, grad.shape[-1]), targets.reshape(-1))
    logits.backward(grad)
    return loss


def train_epoch(
    model: WordLM,
    data: Tensor,
    config: LMConfig,
    optimizer: torch.optim.Optimizer,
    advance: Callable[[int], None] | None = None,
) -> tuple[float, int]:
    """One pass over the (batchified) training data; returns (mean loss, tokens seen)."""
    model.train()
    total, count = 0.0, 0
    state = None
    # The logits of every batch in one memory: each batch's logits (and their gradient, which
    # train_step_loss writes over them) are done with before the next batch's forward.
    logits_memory = OutputMemory()
    for n, (inputs, targets) in enumerate(bptt_batches(data, config.bptt)):
        if config.max_batches is not None and n >= config.max_batches:
            break
        state = _detach(state) if state is not None else None
        optimizer.zero_grad(set_to_none=True)
        logits, state = model(inputs, state, logits_memory)
        loss = train_step_loss(logits, targets)
        del logits  # now holds its own gradient
        nn.utils.clip_grad_norm_(model.parameters(), config.clip)
        optimizer.step()
        total += float(loss) * targets.numel()
        count += targets.numel()
        if advance is not None:
            advance(1)
    return total / max(1, count), count


def batches_per_epoch(corpus: Corpus, config: LMConfig) -> int:
    """How many BPTT batches one epoch of ``config`` runs (what a progress bar counts)."""
    rows = corpus.train.numel() // config.batch
    full = math.ceil((rows - 1) / config.bptt)
    return full if config.max_batches is None else min(full, config.max_batches)


# Config fields a resumed run may change: where and how it computes, not what.
RESUMABLE_CHANGES = ("epochs", "threads", "device", "pipeline", "decoder_split")


class LMTrainer:
    """A training run that can stop after any epoch and resume from a checkpoint file.

    A checkpoint holds the model, the optimizer, the learning-rate schedule's state, the records
    so far and the dropout generators' states, so a run split over several processes draws the
    same masks and reaches the same weights as one uninterrupted run.
    """

    def __init__(self, config: LMConfig, corpus: Corpus) -> None:
        if config.threads is not None:
            torch.set_num_threads(config.threads)
        self.config, self.corpus = config, corpus
        self.device = torch.device(config.device)
        # The model is built on the CPU from the run's CPU generators, which also seed every
        # dropout draw, so a run draws the same weights on every device (and the same masks too
        # with mask_source "cpu").
        self.train = batchify(corpus.train, config.batch).to(self.device)
        self.valid = batchify(corpus.valid, config.eval_batch).to(self.device)
        self.test = batchify(corpus.test, config.eval_batch).to(self.device)
        self.model = WordLM(corpus.vocab_size, config).to(self.device)
        self.lr = config.lr
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=self.lr)
        self.records: list[EpochRecord] = []
        self.best_valid = math.inf

    @property
    def done(self) -> bool:
        return len(self.records) >= self.config.epochs

    def run_epoch(self, advance: Callable[[int], None] | None = None) -> EpochRecord:
        """Train one epoch (timed), evaluate on valid, anneal the learning rate."""
        config = self.config
        start = time.perf_counter()
        loss, tokens = train_epoch(self.model, self.train, config, self.optimizer, advance)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)  # the epoch ends when its kernels have run
        seconds = time.perf_counter() - start
        valid_ppl = evaluate(self.model, self.valid, config.bptt, config.max_eval_batches)
        record = EpochRecord(
            epoch=len(self.records) + 1,
            train_s=seconds,
            tokens_per_s=tokens / seconds,
            train_ppl=math.exp(loss),
            valid_ppl=valid_ppl,
            lr=self.lr,
        )
        self.records.append(record)
        if valid_ppl >= self.best_valid:
            self.lr /= 4.0
            for group in self.optimizer.param_groups:
                group["lr"] = self.lr
        self.best_valid = min(self.best_valid, valid_ppl)
        return record

    def result(self, with_test: bool = True) -> LMTrainResult:
        """The run so far; the test perplexity only when ``with_test`` (it costs an evaluation)."""
        config = self.config
        test_ppl = math.nan
        if with_test:
            test_ppl = evaluate(self.model, self.test, config.bptt, config.max_eval_batches)
        return LMTrainResult(
            mode=config.mode,
            p=config.p,
            hidden=config.hidden,
            layers=config.layers,
            batch=config.batch,
            bptt=config.bptt,
            vocab=self.corpus.vocab_size,
            train_tokens=int(self.corpus.train.numel()),
            threads=torch.get_num_threads(),
            device=str(self.device),
            mask_source=config.mask_source,
            epochs=list(self.records),
            test_ppl=test_ppl,
        )

    def save(self, path: Path) -> None:
        """Write a checkpoint (atomically: a crash mid-write leaves the previous one)."""
        model = self.model
        state = {
            "config": asdict(self.config),
            "model": model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "lr": self.lr,
            "best_valid": self.best_valid,
            "records": [asdict(r) for r in self.records],
            "generators": [g.get_state() for g in (model.mask_gen, model.lstm.generator)],
        }
        with replaced_atomically(path) as partial:
            torch.save(state, partial)

    def load(self, path: Path) -> None:
        """Continue from a checkpoint of the same run (every config field but epochs, threads,
        device, pipeline and decoder_split: a run may go on elsewhere)."""
        try:
            state = torch.load(path, map_location=self.device, weights_only=True)
        except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as exc:
            why = f"not a readable checkpoint of an LSTM run: {unreadable_checkpoint_reason(exc)}"
            raise DataFileError(str(path), why) from exc
        if not isinstance(state, dict) or not isinstance(state.get("config"), dict):
            raise DataFileError(str(path), "not a checkpoint of an LSTM run (no config in it)")
        mine = asdict(self.config)
        for name, value in state["config"].items():
            if name not in RESUMABLE_CHANGES and mine.get(name) != value:
                raise DataFileError(
                    str(path), f"checkpoint has {name}={value!r}, run has {mine.get(name)!r}",
                    field=name,
                )  # fmt: skip
        done = len(state["records"])
        if done > self.config.epochs:
            # The run would end at once with the result of more epochs than it was asked for.
            raise DataFileError(
                str(path),
                f"checkpoint has {done} epochs done, more than the run's {self.config.epochs}: "
                f"ask for {done} or more epochs, or start another checkpoint",
                field="epochs",
            )
        model = self.model
        model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.lr, self.best_valid = float(state["lr"]), float(state["best_valid"])
        self.records = [EpochRecord(**r) for r in state["records"]]
        for gen, gen_state in zip(
            (model.mask_gen, model.lstm.generator), state["generators"], strict=True
        ):
            gen.set_state(gen_state.cpu())  # the generators draw on the CPU


def train_lm(
    config: LMConfig,
    corpus: Corpus,
    advance: Callable[[int], None] | None = None,
    checkpoint: Path | None = None,
    stop_after: int | None = None,
) -> LMTrainResult:
    """Train for ``config.epochs`` epochs; time each epoch's training; evaluate valid and test.

    With ``checkpoint``, resume from that file when it exists and save to it after every epoch;
    ``stop_after`` ends this call after that many more epochs (the test perplexity is then only
    evaluated once the last epoch is done, and is NaN before).
    """
    trainer = LMTrainer(config, corpus)
    if checkpoint is not None and checkpoint.exists():
        trainer.load(checkpoint)
    ran = 0
    while not trainer.done and (stop_after is None or ran < stop_after):
        trainer.run_epoch(advance)
        ran += 1
        if checkpoint is not None:
            trainer.save(checkpoint)
    return trainer.result(with_test=trainer.done)
