"""Dense cycles of one GEMM on a systolic array, from SCALE-Sim v3 (PyPI ``scalesim``).

SCALE-Sim maps a GEMM ``C[M, N] = A[M, K] @ B[K, N]`` onto an ``R x C`` array by its dataflow:
two GEMM dimensions are spatial (folded onto the array's rows and columns), the third is
streamed in time:

=========  ============  ===============  ========
dataflow   array rows    array columns    streamed
=========  ============  ===============  ========
``os``     M             N                K
``ws``     K             N                M
``is``     K             M                N
=========  ============  ===============  ========

Every fold (one ``R x C`` tile of the two spatial dimensions, padded when partial) costs the
same number of cycles: the streamed length plus the array's fill and drain. So this adapter asks
SCALE-Sim's own compute model (``operand_matrix`` and ``systolic_compute_{os,ws,is}``) for the
cycles of a *single* fold with the real streamed length, and multiplies by the number of folds.
The result equals the "Total Cycles" column of SCALE-Sim's COMPUTE_REPORT for the whole GEMM
(checked against full SCALE-Sim runs in ``tests/sparse/cnn/test_accelerator.py``), while the full
simulator's cost grows with the square of the number of folds (it concatenates its demand
matrices fold by fold): a 256x128x300 GEMM already takes 5 s, a ResNet layer would take hours.

Two facts about ``scalesim`` 3.0.0 shape this adapter:

- its memory stage (``double_buffered_scratchpad.service_memory_requests``) calls ``int()`` on a
  one-element array, which NumPy >= 2.3 rejects, so ``scalesim.scale_sim.scalesim.run_scale``
  fails on this project's NumPy; the compute stage, which is what the cycle count comes from,
  works. With its default (CALC) interface bandwidth the memory stage adds no stall cycles, so
  "Total Cycles" is the compute model's count: the fold's demand-matrix rows times the folds,
  minus one (the last cycle is not counted).
- it prints; its output is swallowed here.
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from unstall.config import check

Dataflow = Literal["os", "ws", "is"]
DATAFLOWS: tuple[Dataflow, ...] = ("os", "ws", "is")


@dataclass(frozen=True, kw_only=True)
class ArrayConfig:
    """A systolic array: ``rows x cols`` processing elements and a dataflow."""

    rows: int = 32
    cols: int = 32
    dataflow: Dataflow = "os"

    def __post_init__(self) -> None:
        check(isinstance(self.rows, int) and self.rows >= 1, self, "rows", "must be an int >= 1")
        check(isinstance(self.cols, int) and self.cols >= 1, self, "cols", "must be an int >= 1")
        check(self.dataflow in DATAFLOWS, self, "dataflow", f"must be one of {DATAFLOWS}")

    @property
    def label(self) -> str:
        return f"{self.rows}x{self.cols} {self.dataflow}"


@dataclass(frozen=True, kw_only=True)
class FoldPlan:
    """How a GEMM maps onto the array: spatial sizes, streamed length, fold counts."""

    spatial_rows: int  # GEMM size along the array's rows (Sr in SCALE-Sim)
    spatial_cols: int  # GEMM size along the array's columns (Sc)
    stream: int  # streamed length (T)
    row_folds: int
    col_folds: int

    @property
    def folds(self) -> int:
        return self.row_folds * self.col_folds


def fold_plan(m: int, n: int, k: int, array: ArrayConfig) -> FoldPlan:
    """SCALE-Sim's mapping of ``C[m, n] = A[m, k] @ B[k, n]`` onto ``array``."""
    sr, sc, t = {"os": (m, n, k), "ws": (k, n, m), "is": (k, m, n)}[array.dataflow]
    return FoldPlan(
        spatial_rows=sr,
        spatial_cols=sc,
        stream=t,
        row_folds=math.ceil(sr / array.rows),
        col_folds=math.ceil(sc / array.cols),
    )


def dense_gemm_cycles(m: int, n: int, k: int, array: ArrayConfig) -> int:
    """SCALE-Sim's compute cycles ("Total Cycles") of one dense GEMM on ``array``."""
    for name, value in (("m", m), ("n", n), ("k", k)):
        check(value >= 1, "dense_gemm_cycles", name, f"must be >= 1, got {value}")
    plan = fold_plan(m, n, k, array)
    return plan.folds * fold_cycles(m, n, k, array) - 1


def fold_cycles(m: int, n: int, k: int, array: ArrayConfig) -> int:
    """Cycles of one fold of the GEMM (fill + streamed length + drain), from SCALE-Sim."""
    plan = fold_plan(m, n, k, array)
    # Reduce both spatial dimensions to at most one fold; keep the streamed one as it is.
    sr, sc = min(plan.spatial_rows, array.rows), min(plan.spatial_cols, array.cols)
    t = plan.stream
    one = {"os": (sr, sc, t), "ws": (t, sc, sr), "is": (sc, t, sr)}[array.dataflow]
    return _simulated_fold_rows(*one, array.rows, array.cols, array.dataflow)


@functools.lru_cache(maxsize=4096)
def _simulated_fold_rows(m: int, n: int, k: int, rows: int, cols: int, dataflow: str) -> int:
    """Demand-matrix rows (one per cycle) of a one-fold GEMM, from SCALE-Sim's compute model."""
    compute = _run_compute(m, n, k, rows, cols, dataflow)
    demand, _, _ = compute.get_demand_matrices()
    return int(demand.shape[0])


def _run_compute(m: int, n: int, k: int, rows: int, cols: int, dataflow: str) -> Any:
    """Build SCALE-Sim's operand matrices for a GEMM topology and run its compute model."""
    from scalesim.compute.operand_matrix import operand_matrix
    from scalesim.compute.systolic_compute_is import systolic_compute_is
    from scalesim.compute.systolic_compute_os import systolic_compute_os
    from scalesim.compute.systolic_compute_ws import systolic_compute_ws
    from scalesim.layout_utils import layouts
    from scalesim.scale_config import scale_config
    from scalesim.topology_utils import topologies

    config = scale_config()
    config.set_arr_dims(rows=rows, cols=cols)
    config.set_dataflow(dataflow)
    config.force_valid()
    topo = topologies()
    with tempfile.TemporaryDirectory(prefix="unstall-scalesim-") as tmp:
        path = Path(tmp) / "gemm.csv"
        path.write_text(f"Layer,M,N,K,\ngemm,{m},{n},{k},\n", encoding="utf-8")
        topo.load_arrays(topofile=str(path), mnk_inputs=True)
    compute_types = {
        "os": systolic_compute_os,
        "ws": systolic_compute_ws,
        "is": systolic_compute_is,
    }
    with contextlib.redirect_stdout(io.StringIO()):
        operands = operand_matrix()
        operands.set_params(config_obj=config, topoutil_obj=topo, layoututil_obj=layouts())
        _, ifmap = operands.get_ifmap_matrix()
        _, filt = operands.get_filter_matrix()
        _, ofmap = operands.get_ofmap_matrix()
        compute = compute_types[dataflow]()
        extra: dict[str, Any] = {}
        if dataflow == "ws":  # its set_params also wants the unpruned operands (as scalesim does)
            extra = {
                "ifmap_op_mat_original": operands.ifmap_addr_matrix_original,
                "sparsity_filter_array": operands.sparse_filter_array,
            }
        compute.set_params(
            config_obj=config, ifmap_op_mat=ifmap, filter_op_mat=filt, ofmap_op_mat=ofmap, **extra
        )
        compute.create_demand_matrices()
    return compute
