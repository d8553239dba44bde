"""The systolic-array speed model: SCALE-Sim dense cycles, tile-level zero skipping, speed-ups."""

from __future__ import annotations

import builtins
import contextlib
import io
import math
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from unstall.errors import ConfigError
from unstall.sparse.cnn import AcceleratorConfig, ArrayConfig, LayerTensors, dense_gemm_cycles
from unstall.sparse.cnn.accelerator import CycleCounter, model_speed
from unstall.sparse.cnn.gemms import gemm_shapes, geometry_of
from unstall.sparse.cnn.scalesim_adapter import _run_compute, fold_cycles, fold_plan
from unstall.sparse.cnn.skipping import GemmMasks, busy_steps, effectual_macs


@pytest.fixture(autouse=True)
def one_thread() -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# "Total Cycles" of SCALE-Sim 3.0.0's COMPUTE_REPORT.csv for whole GEMM topologies (M, N, K),
# from full `scalesim.scale_sim.scalesim(...).run_scale()` runs (CALC bandwidth mode) with
# NumPy 2.2: its memory stage fails on NumPy >= 2.3 (see scalesim_adapter's docstring).
SCALESIM_TOTAL_CYCLES = [
    ("os", (16, 16), (16, 16, 16), 45),
    ("os", (16, 16), (100, 50, 30), 1679),
    ("os", (16, 16), (256, 128, 300), 42239),
    ("os", (8, 4), (40, 24, 70), 2399),
    ("ws", (16, 16), (32, 16, 16), 77),
    ("ws", (16, 16), (100, 50, 30), 1167),
    ("ws", (16, 16), (256, 128, 300), 45903),
    ("ws", (8, 4), (40, 24, 70), 3131),
    ("is", (16, 16), (32, 16, 16), 123),
    ("is", (16, 16), (100, 50, 30), 1343),
    ("is", (16, 16), (256, 128, 300), 52895),
    ("is", (8, 4), (40, 24, 70), 3779),
]


@pytest.mark.parametrize(("dataflow", "dims", "mnk", "expected"), SCALESIM_TOTAL_CYCLES)
def test_dense_cycles_match_full_scalesim_runs(
    dataflow: str, dims: tuple[int, int], mnk: tuple[int, int, int], expected: int
) -> None:
    array = ArrayConfig(rows=dims[0], cols=dims[1], dataflow=dataflow)  # type: ignore[arg-type]
    assert dense_gemm_cycles(*mnk, array) == expected


@pytest.mark.parametrize("dataflow", ["os", "ws", "is"])
def test_one_fold_times_folds_equals_scalesims_multi_fold_compute(dataflow: str) -> None:
    array = ArrayConfig(rows=8, cols=4, dataflow=dataflow)  # type: ignore[arg-type]
    m, n, k = 21, 10, 13  # partial folds in every dimension
    demand, _, _ = _run_compute(m, n, k, 8, 4, dataflow).get_demand_matrices()
    assert dense_gemm_cycles(m, n, k, array) == demand.shape[0] - 1


def _max_as_scalar(*args: Any) -> Any:
    """``max()`` whose answer ``int()`` takes on any NumPy: scalesim 3.0.0 writes
    ``int(max(column))`` of an (n, 1) array, a one-element array that NumPy >= 2.3 no longer
    converts; the largest element is what it means."""
    if len(args) == 1:
        return np.asarray(args[0]).max()
    return np.asarray(builtins.max(*args)).max()


def test_full_scalesim_pipeline_agrees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """SCALE-Sim's own top level (compute and memory stages) gives the same cycles. Its memory
    stage (scalesim 3.0.0) calls ``int()`` on a one-element array, which NumPy >= 2.3 refuses:
    that module's ``max`` gets a scalar answer, so the cross-check runs on the NumPy installed."""
    from scalesim.memory import double_buffered_scratchpad_mem as memory
    from scalesim.scale_sim import scalesim

    monkeypatch.setattr(memory, "max", _max_as_scalar, raising=False)

    cfg = tmp_path / "a.cfg"
    cfg.write_text(
        "[general]\nrun_name = t\n[run_presets]\nInterfaceBandwidth = CALC\n"
        "UseRamulatorTrace = False\n[architecture_presets]\nArrayHeight = 8\nArrayWidth = 4\n"
        "ifmapsramszkB = 64\nfiltersramszkB = 64\nofmapsramszkB = 32\nIfmapOffset = 0\n"
        "FilterOffset = 10000000\nOfmapOffset = 20000000\nDataflow = ws\n"
        "ReadRequestBuffer = 32\nWriteRequestBuffer = 32\n[layout]\nIfmapCustomLayout = False\n"
        "FilterCustomLayout = False\nIfmapSRAMBankBandwidth = 10\nIfmapSRAMBankNum = 10\n"
        "IfmapSRAMBankPort = 2\nFilterSRAMBankBandwidth = 10\nFilterSRAMBankNum = 10\n"
        "FilterSRAMBankPort = 2\n[sparsity]\nSparsitySupport = false\n"
    )
    topo = tmp_path / "g.csv"
    topo.write_text("Layer,M,N,K,\nL0,40,24,70,\n")
    layout = tmp_path / "layout.csv"
    layout.write_text("Layer name,x,\n")
    with contextlib.redirect_stdout(io.StringIO()):
        sim = scalesim(
            save_disk_space=True,
            verbose=False,
            config=str(cfg),
            topology=str(topo),
            layout=str(layout),
            input_type_gemm=True,
        )
        sim.run_scale(top_path=str(tmp_path / "out"))
    total = sim.runner.single_layer_sim_object_list[0].get_compute_report_items()[1]
    assert total == dense_gemm_cycles(40, 24, 70, ArrayConfig(rows=8, cols=4, dataflow="ws"))


def test_dense_cycles_grow_with_every_gemm_dimension() -> None:
    array = ArrayConfig(rows=8, cols=8)
    base = dense_gemm_cycles(16, 16, 16, array)
    assert dense_gemm_cycles(32, 16, 16, array) > base
    assert dense_gemm_cycles(16, 32, 16, array) > base
    assert dense_gemm_cycles(16, 16, 32, array) > base
    assert dense_gemm_cycles(17, 16, 16, array) > base  # a partial fold still costs a fold
    assert fold_plan(17, 16, 16, array).folds == 3 * 2


def _reference_busy(
    masks: GemmMasks,
    m: int,
    n: int,
    k: int,
    g: int,
    arr: ArrayConfig,
    rows: int,
    lookahead: int | None = None,
) -> int:
    """Brute force: every (row group, column block, step) of every fold, one by one; with a
    lookahead the row groups meet every ``lookahead`` steps."""
    total = 0
    for gi in range(g):
        a = masks.a[gi] if masks.a is not None else torch.ones(m, k, dtype=torch.bool)
        b = masks.b[gi] if masks.b is not None else torch.ones(k, n, dtype=torch.bool)
        need = masks.need[gi] if masks.need is not None else torch.ones(m, n, dtype=torch.bool)
        useful = a[:, None, :] & b.T[None, :, :] & need[:, :, None]  # (m, n, k)
        order = {"os": (0, 1, 2), "ws": (2, 1, 0), "is": (2, 0, 1)}[arr.dataflow]
        u = useful.permute(*order)  # (array rows, array columns, stream)
        window = u.shape[2] if lookahead is None or rows == arr.rows else lookahead
        for rb in range(math.ceil(u.shape[0] / arr.rows)):
            for cb in range(math.ceil(u.shape[1] / arr.cols)):
                for w0 in range(0, u.shape[2], window):
                    busiest = 0
                    for grp in range(arr.rows // rows):
                        r0 = rb * arr.rows + grp * rows
                        block = u[
                            r0 : r0 + rows, cb * arr.cols : (cb + 1) * arr.cols, w0 : w0 + window
                        ]
                        if block.numel():
                            busiest = max(busiest, int(block.any(0).any(0).sum()))
                    total += busiest
    return total


@pytest.mark.parametrize("dataflow", ["os", "ws", "is"])
def test_busy_steps_match_brute_force(dataflow: str) -> None:
    rng = random.Random(dataflow)
    gen = torch.Generator().manual_seed(len(dataflow) + ord(dataflow[0]))
    for _ in range(60):
        rows, cols = rng.choice([1, 2, 4]), rng.choice([1, 3, 4])
        skip = rng.choice([d for d in range(1, rows + 1) if rows % d == 0])
        lookahead = rng.choice([None, 1, 2, 3])
        m, n, k, g = rng.randint(1, 9), rng.randint(1, 9), rng.randint(1, 9), rng.randint(1, 3)

        def mask(shape: tuple[int, ...]) -> torch.Tensor | None:
            density = rng.random()
            return None if rng.random() < 0.3 else torch.rand(shape, generator=gen) < density

        masks = GemmMasks(a=mask((g, m, k)), b=mask((g, k, n)), need=mask((g, m, n)))
        arr = ArrayConfig(rows=rows, cols=cols, dataflow=dataflow)  # type: ignore[arg-type]
        assert busy_steps(masks, m, n, k, g, arr, skip, lookahead) == _reference_busy(
            masks, m, n, k, g, arr, skip, lookahead
        )


def test_effectual_macs_count_useful_products() -> None:
    gen = torch.Generator().manual_seed(7)
    a, b = torch.rand(2, 5, 4, generator=gen) < 0.5, torch.rand(2, 4, 3, generator=gen) < 0.5
    need = torch.rand(2, 5, 3, generator=gen) < 0.5
    brute = int((a[:, :, None, :] & b.transpose(1, 2)[:, None] & need[..., None]).sum())
    assert effectual_macs(GemmMasks(a=a, b=b, need=need), 5, 3, 4, 2) == brute
    assert effectual_macs(GemmMasks(), 5, 3, 4, 2) == 2 * 5 * 3 * 4


def test_lockstep_skips_only_whole_zero_vectors() -> None:
    # os on 2 rows: rows m=0,1 share a fold; row 0 is all zero, row 1 has one zero step
    a = torch.tensor([[[False, False, False], [True, False, True]]])
    arr = ArrayConfig(rows=2, cols=1)
    assert busy_steps(GemmMasks(a=a), 2, 1, 3, 1, arr, skip_rows=2) == 2  # step 1 skipped
    assert busy_steps(GemmMasks(a=a), 2, 1, 3, 1, arr, skip_rows=1) == 2  # max(0, 2)
    assert busy_steps(GemmMasks(a=~a), 2, 1, 3, 1, arr, skip_rows=2) == 3  # no step all-zero


def _os_rows(rows: list[str]) -> torch.Tensor:
    """An ``a`` mask (1, m, k) from strings of 0/1: one string per array row (output-stationary:
    GEMM row m is array row m, the string is what it streams)."""
    return torch.tensor([[[c == "1" for c in row] for row in rows]])


@pytest.mark.parametrize(
    ("skipping", "lookahead", "expected"),
    [
        ("lockstep", None, 7),  # steps 0-6 have work in some row; step 7 is zero everywhere
        ("per-row", None, 5),  # the densest row (row 1) has 5 non-zero steps
        ("per-row", 1, 7),  # a one-step buffer is lockstep again
        ("per-row", 4, 3 + 2),  # windows 0-3 and 4-7: busiest rows have 3, then 2
        ("per-row", 8, 5),  # one window covers the stream: the unbounded answer
    ],
)
def test_skipping_models_on_a_hand_made_fold(
    skipping: str, lookahead: int | None, expected: int
) -> None:
    a = _os_rows(["10100000", "11101100", "00010010", "00000000"])
    config = AcceleratorConfig(
        array=ArrayConfig(rows=4, cols=2),
        skipping=skipping,  # type: ignore[arg-type]
        lookahead=lookahead,
    )
    busy = busy_steps(GemmMasks(a=a), 4, 2, 8, 1, config.array, config.group_rows, lookahead)
    assert busy == expected


def test_rows_whose_work_is_far_apart_need_a_deep_buffer() -> None:
    # Row 0 works in the second half of the stream, row 1 in the first: unbounded per-row
    # skipping runs both at once (4 cycles), a buffer of 4 steps cannot (the rows meet at step 4).
    a = _os_rows(["00001111", "11110000"])
    arr = ArrayConfig(rows=2, cols=1)
    assert busy_steps(GemmMasks(a=a), 2, 1, 8, 1, arr, 2) == 8  # lockstep
    assert busy_steps(GemmMasks(a=a), 2, 1, 8, 1, arr, 1, None) == 4
    assert busy_steps(GemmMasks(a=a), 2, 1, 8, 1, arr, 1, 8) == 4
    assert busy_steps(GemmMasks(a=a), 2, 1, 8, 1, arr, 1, 4) == 8
    # a second fold (rows 2-3) adds its own time: folds run one after another
    a2 = _os_rows(["00001111", "11110000", "10000000", "00000000"])
    assert busy_steps(GemmMasks(a=a2), 4, 1, 8, 1, arr, 1, None) == 4 + 1


def test_only_streamed_zeros_save_time_in_each_dataflow() -> None:
    """The forward GEMM A = im2col(X) (sparse) @ W (dense): A streams through the array in os
    (along rows, over K) and ws (along rows, over M), so per-row skipping gains; in is A is the
    stationary operand: a PE holding a zero idles but the fold lasts as long, so nothing."""
    gen = torch.Generator().manual_seed(11)
    m, n, k = 64, 32, 64
    a = torch.rand(1, m, k, generator=gen) < 0.5
    dense = {}
    sparse = {}
    for flow in ("os", "ws", "is"):
        arr = ArrayConfig(rows=8, cols=8, dataflow=flow)  # type: ignore[arg-type]
        plan = fold_plan(m, n, k, arr)
        dense[flow] = plan.folds * plan.stream
        sparse[flow] = busy_steps(GemmMasks(a=a), m, n, k, 1, arr, 1, None)
    assert sparse["os"] < 0.8 * dense["os"]
    assert sparse["ws"] < 0.8 * dense["ws"]
    assert sparse["is"] == dense["is"]
    # lockstep: 8 independent half-dense elements are all zero with probability 1/256
    for flow in ("os", "ws"):
        arr = ArrayConfig(rows=8, cols=8, dataflow=flow)  # type: ignore[arg-type]
        lock = busy_steps(GemmMasks(a=a), m, n, k, 1, arr, 8)
        assert lock > 0.95 * dense[flow]


def test_per_row_unbounded_is_bounded_by_the_ideal_and_by_lockstep() -> None:
    gen = torch.Generator().manual_seed(5)
    layer = _layer(
        torch.rand(2, 4, 6, 6, generator=gen) < 0.4,
        torch.rand(2, 8, 6, 6, generator=gen) < 0.4,
        None,
    )
    arr = ArrayConfig(rows=4, cols=4)
    speeds = {}
    for name, cfg in {
        "lockstep": AcceleratorConfig(array=arr),
        "depth 2": AcceleratorConfig(array=arr, skipping="per-row", lookahead=2),
        "unbounded": AcceleratorConfig(array=arr, skipping="per-row"),
    }.items():
        counter = CycleCounter(cfg)
        counter.observe(layer)
        speeds[name] = model_speed([counter.layer_speed("conv")])
    bp = {name: s.backprop_speedup_vs_dense for name, s in speeds.items()}
    assert 1.0 <= bp["lockstep"] <= bp["depth 2"] <= bp["unbounded"]
    assert bp["unbounded"] < speeds["unbounded"].ideal_backprop_speedup_vs_dense


def _layer(x_nz: torch.Tensor, dy_nz: torch.Tensor, alive: torch.Tensor | None) -> LayerTensors:
    conv = torch.nn.Conv2d(4, 8, 3, padding=1)
    geom = geometry_of(conv)
    return LayerTensors(
        name="conv",
        geometry=geom,
        gemms=gemm_shapes(geom, tuple(dy_nz.shape), input_grad=True),
        x_nz=x_nz,
        x_alive=alive,
        dy_nz=dy_nz,
    )


def test_all_dense_tensors_give_speedup_one() -> None:
    ones_x = torch.ones(2, 4, 6, 6, dtype=torch.bool)
    ones_y = torch.ones(2, 8, 6, 6, dtype=torch.bool)
    geom = geometry_of(torch.nn.Conv2d(4, 8, 1))  # 1x1: no padding zeros in im2col
    record = LayerTensors(
        name="c1",
        geometry=geom,
        gemms=gemm_shapes(geom, (2, 8, 6, 6), input_grad=True),
        x_nz=ones_x,
        x_alive=None,
        dy_nz=ones_y,
    )
    counter = CycleCounter(AcceleratorConfig(array=ArrayConfig(rows=4, cols=4)))
    counter.observe(record)
    dense = counter.layer_speed("c1")
    for value in (
        dense.forward_speedup,
        dense.input_grad_speedup,
        dense.weight_grad_speedup,
        dense.backprop_speedup_vs_dense,
        dense.speedup_vs_input_only,
    ):
        assert value == pytest.approx(1.0)
    assert dense.forward.tile_density == pytest.approx(1.0)
    assert dense.forward.macs_full == dense.forward.macs_dense == 2 * 36 * 4 * 8


def test_all_zero_operands_give_the_maximum_skip() -> None:
    array = ArrayConfig(rows=4, cols=4)
    counter = CycleCounter(AcceleratorConfig(array=array))
    zeros_y = torch.zeros(2, 8, 6, 6, dtype=torch.bool)
    counter.observe(_layer(torch.ones(2, 4, 6, 6, dtype=torch.bool), zeros_y, None))
    speed = counter.layer_speed("conv")
    shape = gemm_shapes(
        geometry_of(torch.nn.Conv2d(4, 8, 3, padding=1)), (2, 8, 6, 6), input_grad=True
    )
    ig = shape.input_grad
    assert ig is not None
    plan = fold_plan(ig.m, ig.n, ig.k, array)
    per_fold = fold_cycles(ig.m, ig.n, ig.k, array)
    overhead = per_fold - plan.stream
    # every streamed step skipped: only the folds' fill and drain remain
    assert speed.input_grad is not None
    assert speed.input_grad.full == plan.folds * overhead - 1
    assert speed.input_grad_speedup == pytest.approx(
        (plan.folds * per_fold - 1) / (plan.folds * overhead - 1)
    )
    assert speed.input_grad.tile_density == 0.0 and speed.input_grad.macs_full == 0.0
    assert speed.input_grad.input_only == speed.input_grad.dense  # input-only ignores dY
    assert speed.speedup_vs_input_only > 2.0


def test_output_sparsity_skips_dead_input_positions() -> None:
    array = ArrayConfig(rows=4, cols=4)
    x = torch.rand(2, 4, 6, 6, generator=torch.Generator().manual_seed(1)) < 0.3
    y = torch.ones(2, 8, 6, 6, dtype=torch.bool)
    with_mask, without = (
        CycleCounter(AcceleratorConfig(array=array)),
        CycleCounter(AcceleratorConfig(array=array)),
    )
    with_mask.observe(_layer(x, y, alive=x))
    without.observe(_layer(x, y, alive=None))
    masked = with_mask.layer_speed("conv").input_grad
    plain = without.layer_speed("conv").input_grad
    assert masked is not None and plain is not None
    assert masked.macs_full < 0.5 * plain.macs_full  # 70% of the outputs are not needed
    assert masked.full <= plain.full


def test_model_speed_sums_layers() -> None:
    counter = CycleCounter(AcceleratorConfig(array=ArrayConfig(rows=4, cols=4)))
    gen = torch.Generator().manual_seed(3)
    counter.observe(
        _layer(
            torch.rand(2, 4, 6, 6, generator=gen) < 0.5,
            torch.rand(2, 8, 6, 6, generator=gen) < 0.5,
            None,
        )
    )
    layer = counter.layer_speed("conv")
    total = model_speed([layer, layer])
    assert total.cycles["forward"]["dense"] == 2 * layer.forward.dense
    assert total.backprop_speedup_vs_dense == pytest.approx(layer.backprop_speedup_vs_dense)
    assert total.ideal_backprop_speedup_vs_dense >= total.backprop_speedup_vs_dense


def test_array_and_accelerator_configs_reject_bad_fields() -> None:
    with pytest.raises(ConfigError, match="rows"):
        ArrayConfig(rows=0)
    with pytest.raises(ConfigError, match="dataflow"):
        ArrayConfig(dataflow="xs")  # type: ignore[arg-type]
    grid = ArrayConfig(rows=8, cols=8)
    with pytest.raises(ConfigError, match="row_group"):
        AcceleratorConfig(array=grid, skipping="per-row", row_group=3)
    with pytest.raises(ConfigError, match="per-row model only"):
        AcceleratorConfig(array=grid, lookahead=8)  # lockstep has no buffer to size
    with pytest.raises(ConfigError, match="skipping"):
        AcceleratorConfig(array=grid, skipping="per-pe")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="lookahead"):
        AcceleratorConfig(array=grid, skipping="per-row", lookahead=0)
