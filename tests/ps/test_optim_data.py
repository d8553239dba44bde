"""The shared SGD step, the server's push bookkeeping (no Ray), and the data sources."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch

from unstall.ps.chunks import WIRE_PART_BYTES, WIRE_WHOLE_BYTES, wire_parts
from unstall.ps.data import ArrayData, BatchStream, global_indices
from unstall.ps.links import ServerSpec
from unstall.ps.optim import STEP_BLOCK, SGDConfig, sgd_momentum_step
from unstall.ps.server import PARALLEL_STEP_ELEMENTS, ServerCore
from unstall.usercode import UserCodeError
from unstall.workload import zoo
from unstall.workload.zoo_jobs import SyntheticData

rng = np.random.default_rng(0)


def test_step_is_torch_sgd_with_momentum_on_the_mean_gradient() -> None:
    config = SGDConfig(lr=0.1, momentum=0.9)
    param = rng.standard_normal(1000).astype(np.float32)
    ref = torch.nn.Parameter(torch.from_numpy(param.copy()))
    opt = torch.optim.SGD([ref], lr=0.1, momentum=0.9)
    buf = np.zeros_like(param)
    for _ in range(4):
        grads = [rng.standard_normal(1000).astype(np.float32) for _ in range(3)]
        sgd_momentum_step(param, buf, grads, config)
        ref.grad = torch.from_numpy((grads[0] + grads[1] + grads[2]) / np.float32(3))
        opt.step()
    np.testing.assert_allclose(param, ref.detach().numpy(), rtol=1e-6, atol=1e-7)


def test_step_on_slices_equals_step_on_the_whole_bit_for_bit() -> None:
    """Slices ending anywhere, one worker and two (the fused kernel's own scalar tail would
    round the last ``size % 16`` elements of a call differently)."""
    config = SGDConfig()
    n = 1001
    for workers in (1, 2):
        whole = rng.standard_normal(n).astype(np.float32)
        parts = whole.copy()
        buf_whole, buf_parts = np.zeros(n, np.float32), np.zeros(n, np.float32)
        for _ in range(3):
            grads = [rng.standard_normal(n).astype(np.float32) for _ in range(workers)]
            sgd_momentum_step(whole, buf_whole, grads, config)
            for a, b in ((0, 40), (40, 41), (41, 117), (117, n)):
                sgd_momentum_step(parts[a:b], buf_parts[a:b], [g[a:b] for g in grads], config)
        assert np.array_equal(whole, parts) and np.array_equal(buf_whole, buf_parts)


def test_server_core_steps_once_every_push_is_in_summing_in_rank_order() -> None:
    core = ServerCore(0, workers=3, spec=ServerSpec(), optimizer=SGDConfig(lr=1.0, momentum=0.0))
    core.load({7: (np.zeros(1, np.float32), np.zeros(1, np.float32))})
    g = {
        0: np.array([1e8], np.float32),
        1: np.array([1.0], np.float32),
        2: np.array([-1e8], np.float32),
    }
    assert not core.add_push(0, 0, 2, [g[2]])  # arrival order 2, 0, 1 would sum to 1
    assert not core.add_push(0, 0, 0, [g[0]])
    assert core.add_push(0, 0, 1, [g[1]])
    assert core.apply(0, 0, [(7, 0, 1)])  # the iteration's step is complete
    # rank order in float32: (1e8 + 1) + -1e8 = 0, as 1 is lost beside 1e8
    assert core.state[7][0].tolist() == [0.0]
    assert core.pending == {}


def test_server_core_steps_piece_by_piece_as_the_whole() -> None:
    """Two pieces (a chunk cut in two, and another chunk): each stepped when its pushes are
    in; the iteration is complete only with the last, and equals the step on whole arrays."""
    config = SGDConfig()
    core = ServerCore(0, workers=2, spec=ServerSpec(), optimizer=config)
    a, b = rng.standard_normal(300).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    core.load({0: (a, np.zeros(300, np.float32)), 1: (b, np.zeros(5, np.float32))})
    ga = [rng.standard_normal(300).astype(np.float32) for _ in range(2)]
    gb = [rng.standard_normal(5).astype(np.float32) for _ in range(2)]
    pieces = [[(0, 0, 150)], [(0, 150, 300), (1, 0, 5)]]
    for rank in (1, 0):
        assert core.add_push(3, 1, rank, [ga[rank][150:], gb[rank]]) == (rank == 0)
    assert not core.apply(3, 1, pieces[1])  # half of chunk 0 is still to come
    for rank in (0, 1):
        core.add_push(3, 0, rank, [ga[rank][:150]])
    assert core.apply(3, 0, pieces[0])
    want_a, want_b = a.copy(), b.copy()
    sgd_momentum_step(want_a, np.zeros(300, np.float32), ga, config)
    sgd_momentum_step(want_b, np.zeros(5, np.float32), gb, config)
    assert np.array_equal(core.state[0][0], want_a) and np.array_equal(core.state[1][0], want_b)
    assert core.values(pieces[0]).tolist() == want_a[:150].tolist()
    # one flat array in chunk-id order: the second piece's reply is one view across both chunks
    assert core.values(pieces[1]).tolist() == [*want_a[150:].tolist(), *want_b.tolist()]


def fma_update(param: np.ndarray, buf: np.ndarray, lr: float) -> np.ndarray:
    """``param - lr * buf`` rounded once, as a fused multiply-add does (float32 products are
    exact in float64; the float64 sum's second rounding agrees here, seeded inputs)."""
    exact = param.astype(np.float64) - np.float64(np.float32(lr)) * buf.astype(np.float64)
    return exact.astype(np.float32)


def test_blocked_step_equals_whole_array_arithmetic_bit_for_bit() -> None:
    """Three blocks and a ragged end: the mean in rank order, ``buf * momentum + mean`` rounded
    twice, the update rounded once (torch's fused kernel), on every element."""
    config = SGDConfig(lr=0.05, momentum=0.9)
    n = 2 * STEP_BLOCK + 1234
    param = rng.standard_normal(n).astype(np.float32)
    buf = rng.standard_normal(n).astype(np.float32)
    grads = [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
    mean = (grads[0] + grads[1] + grads[2]) / np.float32(3)
    want_buf = buf * np.float32(0.9) + mean
    want = fma_update(param, want_buf, 0.05)
    sgd_momentum_step(param, buf, grads, config)
    assert np.array_equal(buf, want_buf) and np.array_equal(param, want)
    one = rng.standard_normal(n).astype(np.float32)
    want_buf = buf * np.float32(0.9) + one
    want_one = fma_update(param, want_buf, 0.05)
    one.setflags(write=False)  # as it arrives from the object store
    sgd_momentum_step(param, buf, [one], config, scratch=np.empty(10, np.float32))
    assert np.array_equal(param, want_one) and np.array_equal(buf, want_buf)


def test_step_without_momentum_is_plain_sgd() -> None:
    config = SGDConfig(lr=0.5, momentum=0.0)
    param, buf = np.ones(70, np.float32), np.full(70, 9.0, np.float32)
    grads = [np.full(70, 2.0, np.float32), np.full(70, 4.0, np.float32)]
    sgd_momentum_step(param, buf, grads, config)
    assert param.tolist() == [-0.5] * 70 and buf.tolist() == [3.0] * 70


def test_global_batches_take_every_sample_once_per_epoch() -> None:
    n, batch = 10, 4
    stream = np.concatenate([global_indices(n, 3, i, batch) for i in range(5)])  # 2 epochs
    assert sorted(stream[:10]) == list(range(10)) and sorted(stream[10:20]) == list(range(10))
    assert not np.array_equal(stream[:10], stream[10:20])  # reshuffled each epoch
    assert np.array_equal(global_indices(n, 3, 2, batch), global_indices(n, 3, 2, batch))


def test_worker_batches_are_the_global_batch_in_rank_order() -> None:
    features = np.arange(40, dtype=np.float32).reshape(20, 2)
    labels = np.arange(20, dtype=np.int64)
    data = ArrayData(features, labels, batch_size=3, seed=1)
    streams = [data(rank, 2) for rank in range(2)]
    batches = [[next(s) for _ in range(5)] for s in streams]  # iterations 0..4
    together = torch.cat([batches[r][4][1] for r in range(2)]).numpy()
    assert np.array_equal(together, global_indices(20, 1, 4, 6))
    assert np.array_equal(batches[0][4][0].numpy(), features[together[:3]])


def test_synthetic_batches_depend_on_seed_iteration_and_rank_only() -> None:
    opts = {"in_features": 8, "width": 4, "depth": 2}
    data = SyntheticData(functools.partial(zoo.example_batch, "mlp", **opts), batch_size=2)
    a, b, c = next(data(0, 2)), next(data(0, 2)), next(data(1, 2))
    assert a[0].shape == (2, 8)
    assert torch.equal(a[0], b[0]) and not torch.equal(a[0], c[0])


def two_batches(rank: int, world_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(torch.full((1,), float(i)), torch.zeros(1)) for i in range(2)]


def test_a_data_iterable_that_ends_starts_again() -> None:
    stream = BatchStream(two_batches, 0, 1, seed=0)
    assert [float(stream.next(i)[0]) for i in range(5)] == [0.0, 1.0, 0.0, 1.0, 0.0]


def test_a_spent_generator_and_bad_batches_name_the_data_function() -> None:
    def once(rank: int, world_size: int):  # type: ignore[no-untyped-def]
        yield torch.zeros(1), torch.zeros(1)

    stream = BatchStream(once, 0, 1, seed=0)
    stream.next(0)
    with pytest.raises(UserCodeError, match=r"data function .*once.*cannot start again"):
        stream.next(1)

    def triples(rank: int, world_size: int) -> list[tuple[int, int, int]]:
        return [(1, 2, 3)]

    with pytest.raises(UserCodeError, match=r"triples.*must yield \(inputs, targets\) pairs"):
        BatchStream(triples, 0, 1, seed=0).next(0)
    with pytest.raises(UserCodeError, match="not an iterable"):
        BatchStream(lambda rank, world_size: 3, 0, 1, seed=0)


def test_a_data_loader_that_shuffles_gives_the_same_batches_for_the_same_seed() -> None:
    dataset = torch.utils.data.TensorDataset(torch.arange(32.0), torch.zeros(32))

    def loader(rank: int, world_size: int) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(dataset, batch_size=4, shuffle=True)

    def run(seed: int) -> list[list[float]]:
        stream = BatchStream(loader, 0, 1, seed=seed)
        return [stream.next(i)[0].tolist() for i in range(10)]  # over an epoch's end

    assert run(3) == run(3) and run(3) != run(4)


def test_server_core_steps_a_large_segment_with_threads_exactly() -> None:
    """Two threads each stepping half of a 1 M-element segment: the step of the whole."""
    n = PARALLEL_STEP_ELEMENTS + 7
    config = SGDConfig()
    param = rng.standard_normal(n).astype(np.float32)
    grads = [rng.standard_normal(n).astype(np.float32) for _ in range(2)]
    core = ServerCore(0, workers=2, spec=ServerSpec(), optimizer=config, step_threads=2)
    core.load({0: (param, np.zeros(n, np.float32))})
    for rank in (0, 1):
        core.add_push(0, 0, rank, [grads[rank]])
    assert core.apply(0, 0, [(0, 0, n)])
    want = param.copy()
    sgd_momentum_step(want, np.zeros(n, np.float32), grads, config)
    assert np.array_equal(core.state[0][0], want)


def test_wire_parts_are_views_in_order_and_a_large_array_travels_whole() -> None:
    part = WIRE_PART_BYTES // 4
    small = rng.standard_normal(2 * part + 5).astype(np.float32)
    bias = np.ones(3, np.float32)
    large = np.zeros(WIRE_WHOLE_BYTES // 4 + 1, np.float32)
    parts = wire_parts([small, bias, large])
    assert [p.size for p in parts] == [part, part, 5, 3, large.size]
    assert all(np.shares_memory(p, small) for p in parts[:3]) and parts[4] is large
    assert np.array_equal(np.concatenate(parts[:3]), small)
