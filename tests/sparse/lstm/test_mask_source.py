"""Where the elementwise modes draw their masks: the run's CPU generator, or the model's device."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from lstm_helpers import tiny_texts
from unstall.errors import ConfigError
from unstall.sparse import LSTMBenchConfig
from unstall.sparse.lstm import LMConfig, StructuredDropoutLSTM, build_corpus, train_lm
from unstall.sparse.lstm.masks import DenseMask, MaskGenerators, StructuredMask, sample_mask

pytestmark = pytest.mark.usefixtures("one_torch_thread")

NO_CUDA = not torch.cuda.is_available()
CUDA = torch.device("cuda", 0)


def _lstm(mode: str, source: str, seed: int = 3) -> StructuredDropoutLSTM:
    gen = torch.Generator().manual_seed(seed)
    return StructuredDropoutLSTM(6, 8, 2, dropout=0.4, mode=mode, mask_source=source, generator=gen)


def test_an_unknown_mask_source_is_refused_naming_the_field() -> None:
    with pytest.raises(ConfigError, match=r"mask_source.*'gpu'"):
        _lstm("standard", "gpu")
    with pytest.raises(ConfigError, match="mask_source"):
        LMConfig(mask_source="gpu")
    with pytest.raises(ConfigError, match="mask_source"):
        LSTMBenchConfig(mask_source="gpu")


@pytest.mark.parametrize("mode", ["standard", "locked", "structured"])
def test_on_the_cpu_both_sources_draw_the_same_masks(mode: str) -> None:
    """On the CPU there is nothing to move: "device" draws straight from the run's generator, so a
    CPU run is the same whichever source it names (every CPU figure stands)."""
    x = torch.randn(5, 3, 6, generator=torch.Generator().manual_seed(0))
    outs = {}
    for source in ("cpu", "device"):
        lstm = _lstm(mode, source)
        outs[source] = (lstm(x)[0], lstm.last_masks)
    torch.testing.assert_close(outs["cpu"][0], outs["device"][0], rtol=0, atol=0)
    for a, b in zip(outs["cpu"][1] or (), outs["device"][1] or (), strict=True):
        assert a.input is not None and b.input is not None
        torch.testing.assert_close(a.input.dense(5, 3), b.input.dense(5, 3), rtol=0, atol=0)


def test_the_cpu_generator_is_used_as_is_off_the_gpu_and_for_structured_modes() -> None:
    cpu = torch.Generator().manual_seed(1)
    gens = MaskGenerators("device")
    assert gens.for_draw(cpu, "standard", torch.device("cpu")) is cpu
    assert gens.for_draw(cpu, "standard", None) is cpu
    assert gens.for_draw(cpu, "structured", CUDA) is cpu  # kept sets are shapes: the host's
    assert MaskGenerators("cpu").for_draw(cpu, "standard", CUDA) is cpu


@pytest.mark.skipif(NO_CUDA, reason="needs a CUDA GPU (the device machine)")
def test_on_the_gpu_device_masks_are_drawn_there_seeded_once_a_draw_from_the_cpu() -> None:
    cpu = torch.Generator().manual_seed(7)
    gen = MaskGenerators("device").for_draw(cpu, "standard", CUDA)
    assert gen.device.type == "cuda"
    mask = sample_mask("standard", 4, 3, 16, 0.5, gen)
    assert isinstance(mask, DenseMask) and mask.values.device.type == "cuda"
    assert set(mask.values.unique().tolist()) <= {0.0, 2.0}
    reference = torch.Generator().manual_seed(7)
    torch.randint(1 << 62, (1,), generator=reference)  # the one draw a sequence takes
    assert torch.equal(cpu.get_state(), reference.get_state())
    # the same CPU state gives the same device masks: a run is reproducible on one device
    again = MaskGenerators("device").for_draw(torch.Generator().manual_seed(7), "standard", CUDA)
    torch.testing.assert_close(sample_mask("standard", 4, 3, 16, 0.5, again).values, mask.values)


@pytest.mark.skipif(NO_CUDA, reason="needs a CUDA GPU (the device machine)")
def test_a_structured_mask_moves_to_the_gpu_whole() -> None:
    mask = sample_mask("structured", 6, 2, 32, 0.5, torch.Generator().manual_seed(0))
    assert isinstance(mask, StructuredMask)
    moved = mask.to(CUDA)
    assert all(k.device.type == "cuda" for k in moved.keep)
    assert [k.cpu().tolist() for k in moved.keep] == [k.tolist() for k in mask.keep]
    assert moved.to(CUDA) is moved


@pytest.mark.skipif(NO_CUDA, reason="needs a CUDA GPU (the device machine)")
def test_a_gpu_run_with_device_masks_learns_and_resumes_as_one_run(tmp_path: Path) -> None:
    corpus = build_corpus(tiny_texts(30))
    config = LMConfig(mode="standard", p=0.3, hidden=8, layers=1, bptt=5, batch=2, eval_batch=2,
                      epochs=2, device="cuda", mask_source="device")  # fmt: skip
    whole = train_lm(config, corpus)
    assert whole.mask_source == "device" and whole.device.startswith("cuda")
    assert math.isfinite(whole.final_valid_ppl) and whole.final_valid_ppl < 6.5  # 6 words + eos
    checkpoint = tmp_path / "run.pt"
    train_lm(config, corpus, checkpoint=checkpoint, stop_after=1)
    last = train_lm(config, corpus, checkpoint=checkpoint)
    assert [e.valid_ppl for e in last.epochs] == pytest.approx(
        [e.valid_ppl for e in whole.epochs], rel=1e-5
    )
