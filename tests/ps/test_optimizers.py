"""The servers' optimizers without Ray: each equals PyTorch's, a step on slices equals the step
on the whole bit for bit (what keeps every placement exact), and checkpoints round-trip."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from unstall.errors import ConfigError, DataFileError
from unstall.ps import AdamConfig, PSCheckpoint, ServerSpec, SGDConfig
from unstall.ps.server import ServerCore

rng = np.random.default_rng(3)

OPTIMIZERS = {
    "sgd-wd-nesterov": (
        SGDConfig(lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True),
        lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True),
    ),
    "sgd-wd": (
        SGDConfig(lr=0.05, momentum=0.0, weight_decay=0.1),
        lambda p: torch.optim.SGD(p, lr=0.05, weight_decay=0.1),
    ),
    "adam": (AdamConfig(lr=0.01), lambda p: torch.optim.Adam(p, lr=0.01)),
    "adam-wd": (
        AdamConfig(lr=0.02, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.05),
        lambda p: torch.optim.Adam(p, lr=0.02, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05),
    ),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_is_torchs_on_the_mean_gradient(name: str) -> None:
    config, make_torch = OPTIMIZERS[name]
    param = rng.standard_normal(1000).astype(np.float32)
    ref = torch.nn.Parameter(torch.from_numpy(param.copy()))
    opt = make_torch([ref])
    state = [np.zeros_like(param) for _ in range(config.slots)]
    for step in range(1, 6):
        grads = [rng.standard_normal(1000).astype(np.float32) for _ in range(3)]
        config.step(param, state, grads, step=step)
        ref.grad = torch.from_numpy((grads[0] + grads[1] + grads[2]) / np.float32(3))
        opt.step()
    np.testing.assert_allclose(param, ref.detach().numpy(), rtol=2e-5, atol=1e-6)


@given(
    name=st.sampled_from(sorted(OPTIMIZERS)),
    cuts=st.lists(st.integers(1, 332), min_size=1, max_size=5, unique=True),
    workers=st.integers(1, 3),
)
def test_a_step_on_slices_is_the_step_on_the_whole_bit_for_bit(
    name: str, cuts: list[int], workers: int
) -> None:
    config, _ = OPTIMIZERS[name]
    n = 333
    gen = np.random.default_rng(len(cuts) * 7 + workers)
    whole = gen.standard_normal(n).astype(np.float32)
    parts = whole.copy()
    state_whole = [np.zeros(n, np.float32) for _ in range(config.slots)]
    state_parts = [np.zeros(n, np.float32) for _ in range(config.slots)]
    bounds = [0, *sorted(cuts), n]
    for step in (1, 2, 3):
        grads = [gen.standard_normal(n).astype(np.float32) for _ in range(workers)]
        config.step(whole, state_whole, grads, step=step)
        for a, b in itertools.pairwise(bounds):
            part_state = [s[a:b] for s in state_parts]
            config.step(parts[a:b], part_state, [g[a:b] for g in grads], step=step)
    assert np.array_equal(whole, parts)
    assert all(np.array_equal(x, y) for x, y in zip(state_whole, state_parts, strict=True))


def test_bad_settings_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"nesterov.*momentum > 0"):
        SGDConfig(momentum=0.0, nesterov=True)
    with pytest.raises(ConfigError, match="beta2"):
        AdamConfig(beta2=1.0)
    with pytest.raises(ConfigError, match="weight_decay"):
        AdamConfig(weight_decay=-1.0)
    with pytest.raises(ConfigError, match="step"):
        AdamConfig().step(np.zeros(4, np.float32), [np.zeros(4, np.float32)] * 2, [], step=0)


def test_a_server_keeps_adams_two_moments_per_chunk_and_refuses_sgd_state() -> None:
    core = ServerCore(0, workers=1, spec=ServerSpec(), optimizer=AdamConfig(lr=0.1))
    zeros = np.zeros(3, np.float32)
    core.load(
        {0: (np.ones(3, np.float32), zeros, zeros), 1: (np.ones(2, np.float32), *[zeros[:2]] * 2)}
    )
    assert len(core.slots) == 2 and core.slots[0].size == 5
    assert core.add_push(0, 0, 0, [np.ones(5, np.float32)])
    core.apply(0, 0, ((0, 0, 3), (1, 0, 2)))
    # Adam's first step moves every element by lr (the bias-corrected m / sqrt(v) is 1).
    np.testing.assert_allclose(core.param, np.full(5, 0.9), rtol=1e-6)
    assert np.all(core.state[0][1] > 0) and np.all(core.state[1][2] > 0)
    with pytest.raises(Exception, match=r"1 optimizer state array.*adam keeps 2"):
        core.load({2: (zeros, zeros)})


def _checkpoint(**changes: object) -> PSCheckpoint:
    params = (np.arange(6, dtype=np.float32), np.ones(2, np.float32))
    fields: dict[str, object] = {
        "iteration": 3,
        "params": params,
        "state": (tuple(p * 2 for p in params), tuple(p * 3 for p in params)),
        "optimizer": AdamConfig(lr=0.01, weight_decay=0.1),
        "buffers": {"bn.running_mean": torch.arange(4.0)},
        "seed": 5,
        "workers": 3,
        "model": "model.py:build",
        **changes,
    }
    return PSCheckpoint(**fields)  # type: ignore[arg-type]


def test_a_checkpoint_round_trips_through_its_file(tmp_path: Path) -> None:
    saved = _checkpoint()
    path = saved.save(tmp_path / "sub" / "run.pt")
    loaded = PSCheckpoint.load(path)
    assert loaded.optimizer == saved.optimizer and loaded.iteration == 3
    assert (loaded.seed, loaded.workers, loaded.model) == (5, 3, "model.py:build")
    for a, b in zip(
        (*loaded.params, *loaded.state[0], *loaded.state[1]),
        (*saved.params, *saved.state[0], *saved.state[1]),
        strict=True,
    ):
        assert np.array_equal(a, b)
    assert torch.equal(loaded.buffers["bn.running_mean"], torch.arange(4.0))
    assert [p.name for p in path.parent.iterdir()] == ["run.pt"]  # no temporary file left


def test_a_checkpoint_refuses_what_it_cannot_resume(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="state"):
        _checkpoint(state=((np.zeros(6, np.float32), np.zeros(2, np.float32)),))
    ckpt = _checkpoint()
    with pytest.raises(ConfigError, match="another model"):
        ckpt.check_fits([6, 3], workers=3, seed=5)
    with pytest.raises(ConfigError, match="3 workers, not 2"):
        ckpt.check_fits([6, 2], workers=2, seed=5)
    with pytest.raises(ConfigError, match="seed 5, not 0"):
        ckpt.check_fits([6, 2], workers=3, seed=0)
    ckpt.check_fits([6, 2], workers=3, seed=5)
    bad = tmp_path / "notes.pt"
    bad.write_text("not a checkpoint")
    with pytest.raises(DataFileError, match=r"notes.pt: not a readable checkpoint of `unstall ps`"):
        PSCheckpoint.load(bad)
    torch.save({"weights": 1}, bad)
    with pytest.raises(DataFileError, match=r"notes.pt.*want unstall.ps.checkpoint"):
        PSCheckpoint.load(bad)
    with pytest.raises(DataFileError, match="no such file"):
        PSCheckpoint.load(tmp_path / "missing.pt")


class _Foreign:
    """A class a weights-only load refuses (not on torch's allowed list)."""


def test_a_corrupt_checkpoint_is_one_line_without_torchs_unsafe_advice(tmp_path: Path) -> None:
    # torch's refusal of a weights-only load advises weights_only=False (it would run code from
    # the file) over several lines and asks to file an issue: none of that may reach the user.
    good = tmp_path / "good.pt"
    _checkpoint().save(good)
    files = {
        "garbage.pt": b"garbage\n",
        "empty.pt": b"",
        "cut.pt": good.read_bytes()[: good.stat().st_size // 2],
    }
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
    torch.save({"format": _Foreign()}, tmp_path / "foreign.pt")
    for name in [*files, "foreign.pt"]:
        with pytest.raises(DataFileError) as info:
            PSCheckpoint.load(tmp_path / name)
        message = str(info.value)
        assert message.startswith(f"{tmp_path / name}: not a readable checkpoint of `unstall ps`")
        assert "\n" not in message and "weights_only" not in message, message
        assert "file an issue" not in message and "Please" not in message, message
    with pytest.raises(DataFileError, match=r"Unsupported operand \d+$"):
        PSCheckpoint.load(tmp_path / "garbage.pt")
