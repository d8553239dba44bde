"""The worst held-out point of a calibration, in words: what it is, why the model misses it,
and which placements are hardest (placements that ran faster on more nodes, which a model where
spreading never shortens communication cannot follow)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from unstall.workload.calibration_results import WorstPoint


def explain_worst(worst: WorstPoint, points: pd.DataFrame, by_nodes: Mapping[int, float]) -> str:
    """Say what the worst point is, why the model misses it, and which placements are hardest."""
    sign = "under" if worst.predicted_s < worst.measured_s else "over"
    text = (
        f"Worst held-out point: {worst.app} placement '{worst.placement}' at local batch "
        f"{worst.local_bsz}: measured {worst.measured_s:.3g} s, predicted "
        f"{worst.predicted_s:.3g} s ({worst.rel_error:.0%} {sign}-prediction). "
    )
    app_points = points[points["app"] == worst.app]
    others = app_points[app_points["placement"] != worst.placement]
    if worst.placement == "1":
        text += (
            "'1' is the only placement without communication: held out, the compute term must be "
            "read from multi-GPU placements, where compute and exposed communication add up, and "
            "the fit gives compute what belongs to communication. "
        )
    elif sign == "under":
        text += _inversion_sentence(app_points[app_points["local_bsz"] == worst.local_bsz], worst)
    else:
        text += "Its neighbours in placement and batch were faster: measurement noise. "
    if not others.empty and worst.local_bsz > others["local_bsz"].max():
        text += (
            f"No other placement was measured at a local batch above "
            f"{int(others['local_bsz'].max())}, so the compute term is also extrapolated. "
        )
    return text + _hardest_nodes_sentence(points, by_nodes)


def _inversions(points: pd.DataFrame) -> pd.DataFrame:
    """Pairs at the same app and batch where more nodes and at least as many GPUs ran faster."""
    cols = ["app", "local_bsz", "placement", "n_nodes", "n_gpus", "measured_s"]
    pairs = points[cols].merge(points[cols], on=["app", "local_bsz"], suffixes=("", "_more"))
    pairs = pairs[
        (pairs["n_nodes_more"] > pairs["n_nodes"])
        & (pairs["n_gpus_more"] >= pairs["n_gpus"])
        & (pairs["measured_s_more"] < pairs["measured_s"])
    ]
    return pairs.assign(ratio=pairs["measured_s"] / pairs["measured_s_more"])


def _inversion_sentence(same_batch: pd.DataFrame, worst: WorstPoint) -> str:
    pairs = _inversions(same_batch)
    pairs = pairs[pairs["placement"] == worst.placement]
    if pairs.empty:
        return (
            "Its neighbours in placement and batch do not show the same time, so the model reads "
            "it as measurement noise. "
        )
    best = pairs.iloc[int(np.argmax(pairs["ratio"].to_numpy()))]
    return (
        f"At the same batch '{best['placement_more']}' ({best['n_nodes_more']} nodes, "
        f"{best['n_gpus_more']} GPUs) took {best['measured_s_more']:.3g} s: more GPUs over more "
        "nodes, yet faster, which a model where more nodes or GPUs never shorten communication "
        "cannot follow. "
    )


def _hardest_nodes_sentence(points: pd.DataFrame, by_nodes: Mapping[int, float]) -> str:
    text = (
        "Median held-out error by number of nodes: "
        + ", ".join(f"{n}: {e:.1%}" for n, e in sorted(by_nodes.items()))
        + "."
    )
    hardest = max(by_nodes, key=lambda n: by_nodes[n])
    pairs = _inversions(points)
    pairs = pairs[pairs["n_nodes"] == hardest]
    if pairs.empty:
        return text
    share = len(pairs.drop_duplicates(["app", "local_bsz", "placement"])) / max(
        1, int((points["n_nodes"] == hardest).sum())
    )
    top = pairs.iloc[int(np.argmax(pairs["ratio"].to_numpy()))]
    return text + (
        f" Placements on {hardest} node(s) are the hardest: {share:.0%} of them ran slower than "
        "some placement of the same application and batch with more nodes and at least as many "
        f"GPUs (worst: {top['app']} '{top['placement']}' {top['measured_s']:.3g} s vs "
        f"'{top['placement_more']}' {top['measured_s_more']:.3g} s at batch {top['local_bsz']}). "
        "Links, bytes and ring steps cannot make spreading faster, so the model, which the "
        "simulator needs to be monotone, under-predicts these."
    )
