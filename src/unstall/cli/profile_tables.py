"""The tables of `unstall profile fit`: the sweep's points with every candidate's fit, the
candidates' scores, and the pick."""

from __future__ import annotations

from typing import TYPE_CHECKING

from unstall.cli.common import console, table

if TYPE_CHECKING:
    from unstall.profile import CommStallFit

MS = 1e3


def print_fit(result: CommStallFit) -> None:
    """The points with every candidate's fit, the candidates' scores, and the pick."""
    points = [*result.points, *([result.held_out] if result.held_out else [])]
    rows = [
        (
            p.variant + (" (held out)" if p is result.held_out else ""),
            p.layers,
            p.gradient_tensors,
            p.gradient_bytes / 1e6,
            len(p.bucket_bytes),
            p.backward_s * MS,
            p.stall(result.stall) * MS,
            *(c.model.predict_point(p) * MS for c in result.candidates),
        )
        for p in points
    ]
    columns = ["variant", "layers", "tensors", "grad MB", "buckets", "backward ms", "measured ms"]
    columns += [f"{c.name} ms" for c in result.candidates]
    console.print(table(f"{result.stall} stall per iteration", columns, rows))
    _print_candidates(result)


def _print_candidates(result: CommStallFit) -> None:
    """Each candidate's scores and coefficients, the link's own, the pick and its prediction."""
    held = result.held_out.variant if result.held_out else None
    groups = result.candidates[0].cross_validation.groups
    scores = [
        (
            c.name + (" *" if c.name == result.selected else ""),
            c.parameters,
            c.quality.r2,
            f"{c.quality.mean_abs_rel_error:.1%}",
            f"{c.cross_validation.mean_abs_rel_error:.1%}",
            f"{c.cross_validation.max_abs_rel_error:.1%}",
            "-" if c.quality.held_out_rel_error is None else f"{c.quality.held_out_rel_error:+.1%}",
        )
        for c in result.candidates
    ]
    columns = ["model (* picked)", "params", "R^2", "mean |err|", f"leave-one-{groups}-out"]
    columns += ["max", f"{held} err" if held else "held out"]
    console.print(table("candidates: in-sample fit and cross-validated error", columns, scores))
    for c in result.candidates:
        console.print(f"{c.name}: {c.formula}; {c.model.describe()}", highlight=False)
    if result.link_per_byte_s is not None and result.link_per_bucket_s is not None:
        console.print(
            f"the emulated link itself: {result.link_per_bucket_s * MS:.4g} ms per bucket,"
            f" {result.link_per_byte_s * 1e9:.4g} s/GB (ring bytes over bandwidth)",
            highlight=False,
        )
    console.print(f"picked {result.selected}: {result.reason}", highlight=False)
    if result.held_out is not None:
        chosen = result.chosen.quality
        assert chosen.held_out_predicted_s is not None and chosen.held_out_rel_error is not None
        console.print(
            f"{held}: predicted {chosen.held_out_predicted_s * MS:.4g} ms by {result.selected},"
            f" measured {result.held_out.stall(result.stall) * MS:.4g} ms"
            f" ({chosen.held_out_rel_error:+.1%})",
            highlight=False,
        )
