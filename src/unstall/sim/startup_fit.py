"""Fit a :class:`~unstall.sim.startup.StartupModel` on the set-ups measured by live runs.

Input: the JSON a live run writes (``unstall live run --json``, :meth:`LiveRun.to_json`), whose
``setups`` rows say, for each segment of each job, whether it was the job's start-up or a
restore, what its placement spanned (GPUs, nodes, racks), its model and its wall seconds.

Each kind is fitted on its own: the span terms by least squares with a soft-L1 loss (a few
set-ups that took a busy machine ten times longer must not drag every other prediction) and
non-negative terms (a set-up that spans more never costs less); then each model with at least
:data:`MIN_MODEL_SAMPLES` set-ups gets the median of its residuals as an offset, shrunk towards 0
by ``n / (n + SHRINK)`` (a model seen a few times says little). A kind with fewer than
:data:`MIN_SAMPLES` set-ups (few runs preempt) takes the other kind's terms.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from unstall.errors import DataFileError, UnstallError
from unstall.sim.startup import SetupTerms, StartupModel

KINDS = ("startup", "restore")
MIN_SAMPLES = 4  # set-ups of one kind below which it borrows the other kind's terms
MIN_MODEL_SAMPLES = 3  # set-ups of one model below which it gets no offset of its own
SHRINK = 5.0  # a model's offset is its median residual x n / (n + SHRINK)
NEEDED = ("kind", "model", "gpus", "nodes", "racks", "setup_wall_s")


def read_setups(paths: Sequence[str | Path]) -> tuple[pd.DataFrame, str]:
    """The measured set-ups of the live runs at ``paths`` (one row each, with its ``run``),
    and the compute mode they share; a :class:`DataFileError` names a file that is no live
    run's JSON, or one from before live runs recorded their set-ups."""
    frames, modes = [], set()
    for path in paths:
        where = str(path)
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as exc:
            raise DataFileError(where, f"cannot read it: {exc.strerror or exc}") from None
        except json.JSONDecodeError as exc:
            raise DataFileError(where, f"not JSON: {exc.msg}", line=exc.lineno) from None
        if not isinstance(data, dict) or "live" not in data:
            raise DataFileError(where, "not a live run's JSON (`unstall live run --json`)")
        if "setups" not in data:
            raise DataFileError(
                where,
                "holds no measured set-ups (a live run from before they were recorded): run "
                "it again",
                field="setups",
            )
        frame = pd.DataFrame(data["setups"])
        missing = [c for c in NEEDED if c not in frame.columns]
        if len(frame) and missing:
            raise DataFileError(where, f"set-up rows lack {missing}", field="setups")
        frame["run"] = where
        frames.append(frame)
        modes.add(str(data["live"].get("compute", "emulated")))
    if len(modes) > 1:
        raise UnstallError(
            f"the runs mix compute modes {sorted(modes)}: fit one model per mode (their "
            "set-ups differ: real compute builds the model and restores real checkpoints)"
        )
    setups = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=NEEDED)
    return setups, modes.pop() if modes else "emulated"


def fit_startup_model(
    setups: pd.DataFrame, *, compute: str = "emulated", source: str = "", command: str = ""
) -> StartupModel:
    """A start-up model fitted on ``setups`` (columns as :func:`read_setups` gives them)."""
    if len(setups) == 0:
        raise UnstallError("no measured set-ups to fit on: the runs started no job")
    fitted = {kind: _fit_kind(setups[setups["kind"] == kind]) for kind in KINDS}
    startup, restore = fitted["startup"], fitted["restore"]
    # A kind with too few set-ups of its own borrows the other's terms (samples 0 says so).
    if startup is None and restore is not None:
        startup = replace(restore, samples=0)
    if restore is None and startup is not None:
        restore = replace(startup, samples=0)
    if startup is None or restore is None:
        raise UnstallError(
            f"too few set-ups to fit on ({len(setups)}; at least {MIN_SAMPLES} of one kind)"
        )
    return StartupModel(
        startup=startup,
        restore=restore,
        compute=compute,
        source=source,
        command=command,
    )


def _fit_kind(rows: pd.DataFrame) -> SetupTerms | None:
    if len(rows) < MIN_SAMPLES:
        return None
    design = _design(rows)
    y = rows["setup_wall_s"].to_numpy(dtype=float)
    terms = _robust_nonnegative(design, y)
    residual = y - design @ terms
    models = rows["model"].astype(str).to_numpy()
    offsets = []
    for model in sorted(set(models)):
        mine = residual[models == model]
        if len(mine) >= MIN_MODEL_SAMPLES:
            offset = float(np.median(mine)) * len(mine) / (len(mine) + SHRINK)
            if abs(offset) >= 1e-4:
                offsets.append((model, round(offset, 6)))
    by_model = dict(offsets)
    predicted = np.maximum(0.0, design @ terms + [by_model.get(m, 0.0) for m in models])
    return SetupTerms(
        base_s=round(float(terms[0]), 6),
        per_gpu_s=round(float(terms[1]), 6),
        per_node_s=round(float(terms[2]), 6),
        per_rack_s=round(float(terms[3]), 6),
        by_model_s=tuple(offsets),
        samples=len(rows),
        median_abs_error_s=float(np.median(np.abs(predicted - y))),
        median_s=float(np.median(y)),
    )


def _design(rows: pd.DataFrame) -> np.ndarray:
    """One row per set-up: 1, GPUs, nodes and racks beyond the first."""
    spans = [np.maximum(0, rows[c].to_numpy(dtype=float) - 1) for c in ("gpus", "nodes", "racks")]
    return np.column_stack([np.ones(len(rows)), *spans])


def _robust_nonnegative(design: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative terms minimising a soft-L1 loss of the residuals, on the scale of the
    set-ups' median absolute deviation (below it, least squares; above, absolute)."""
    from scipy.optimize import least_squares

    scale = float(np.median(np.abs(y - np.median(y))))
    scale = scale if scale > 0 else max(float(np.median(y)), 1e-3)
    start = np.zeros(design.shape[1])
    start[0] = max(float(np.median(y)), 0.0)
    used = design.any(axis=0)  # a span the runs never crossed keeps its term at 0
    fit = least_squares(
        lambda x: design[:, used] @ x - y,
        start[used],
        bounds=(0.0, math.inf),
        loss="soft_l1",
        f_scale=scale,
    )
    terms = np.zeros(design.shape[1])
    terms[used] = fit.x
    return terms
