"""The sweep the comm-stall model is fitted on: one point per model variant, with its DDP buckets,
its one-worker backward time and both measured communication stalls.

DDP does not reduce gradient tensors one by one: it packs them, in reverse registration order,
into buckets (the first closes at 1 MiB, the others at ``bucket_mb``, default 25 MiB) and
all-reduces each bucket as soon as backward has produced all of its gradients
(:func:`ddp_bucket_bytes`). A sweep is long (minutes a variant on a CPU), so
:func:`measure_points` takes the points already measured and measures only the others; with
:func:`load_points` and :func:`save_points` a sweep resumes from its file.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from unstall.config import check, read_text_file
from unstall.errors import DataFileError
from unstall.profile.config import ProfileConfig
from unstall.profile.job import LossFunction, ModelFunction, ProfiledJob, model_shape
from unstall.profile.measure import profile_job
from unstall.profile.names import resolve_data, resolve_loss, resolve_model
from unstall.profile.report import StallReport
from unstall.profile.sources import DataSource
from unstall.results import JsonResult, write_text_atomically

# The stalls a fit can model: each one, or "comm", all communication over the link (their sum:
# what N workers over the network add to the one-worker iteration).
STALL_KINDS = {
    "comm": ("interconnect_stall_s", "network_stall_s"),
    "interconnect": ("interconnect_stall_s",),
    "network": ("network_stall_s",),
}
FIRST_BUCKET_BYTES = 1024 * 1024  # torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
MIB = 1024 * 1024

# The comm-stall model's default sweep: depth sweeps of three zoo families, and a model of
# another family held out to test the fit's prediction.
DEFAULT_SWEEP = (
    "resnet:depth=18",
    "resnet:depth=34",
    "resnet:depth=50",
    "vgg:depth=11",
    "vgg:depth=13",
    "vgg:depth=16",
    "mlp:depth=2",
    "mlp:depth=4",
    "mlp:depth=8",
)
DEFAULT_HELD_OUT = "mobilenet_v2"


def ddp_bucket_bytes(
    tensor_bytes: Sequence[int], *, cap_bytes: int, first_cap_bytes: int = FIRST_BUCKET_BYTES
) -> tuple[int, ...]:
    """The bytes of each DDP gradient bucket, in the order DDP reduces them.

    ``tensor_bytes`` in registration order (``model.parameters()``). DDP walks them in reverse
    (the order backward produces them) and closes a bucket once it holds at least its limit:
    ``first_cap_bytes`` for the first, ``cap_bytes`` for every other; the rest is the last.
    """
    check(cap_bytes > 0 and first_cap_bytes > 0, "ddp_bucket_bytes", "cap_bytes", "must be > 0")
    buckets: list[int] = []
    current = 0
    for size in reversed(tensor_bytes):
        current += size
        if current >= (first_cap_bytes if not buckets else cap_bytes):
            buckets.append(current)
            current = 0
    if current:
        buckets.append(current)
    return tuple(buckets)


@dataclass(frozen=True, kw_only=True)
class SweepPoint(JsonResult):
    """One variant: its static facts, its DDP buckets (bytes, in reduction order), its one-worker
    backward time, and both measured communication stalls (seconds per iteration)."""

    variant: str
    layers: int
    gradient_tensors: int
    gradient_bytes: int
    bucket_bytes: tuple[int, ...]
    backward_s: float
    interconnect_stall_s: float
    network_stall_s: float

    def stall(self, kind: str) -> float:
        """The measured stall of ``kind`` (see :data:`STALL_KINDS`), seconds per iteration."""
        check(kind in STALL_KINDS, "SweepPoint", "stall", f"must be one of {sorted(STALL_KINDS)}")
        return float(sum(getattr(self, name) for name in STALL_KINDS[kind]))

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> SweepPoint:
        """The point of ``to_dict()``'s output."""
        values = dict(data)
        values["bucket_bytes"] = tuple(values["bucket_bytes"])  # type: ignore[arg-type]
        return cls(**values)  # type: ignore[arg-type]


def _fastest_difference(report: StallReport, later: str, earlier: str) -> float:
    """``later - earlier`` between the two runs' fastest repeats (0 when either is absent)."""
    if later not in report.runs or earlier not in report.runs:
        return 0.0
    return max(0.0, report.runs[later].min_s - report.runs[earlier].min_s)


def sweep_point(
    variant: str, report: StallReport, tensor_bytes: Sequence[int], bucket_mb: float
) -> SweepPoint:
    """The sweep point of ``variant`` from its profile ``report``; ``tensor_bytes`` are its
    parameter tensors' bytes in registration order, ``bucket_mb`` DDP's bucket size.

    The stalls are differences of each run's *fastest* repeat, not of the medians the report
    shows: on a shared machine other work only ever adds time to a run, so the fastest repeat
    is the best estimate of the undisturbed time, and the fit should not learn the disturbance.
    """
    profile = report.job_profile
    return SweepPoint(
        variant=variant,
        layers=profile.layers,
        gradient_tensors=profile.gradient_tensors,
        gradient_bytes=profile.gradient_bytes,
        bucket_bytes=ddp_bucket_bytes(tensor_bytes, cap_bytes=int(bucket_mb * MIB)),
        backward_s=report.phases["compute"]["backward"],
        interconnect_stall_s=_fastest_difference(report, "local", "compute"),
        network_stall_s=_fastest_difference(report, "network", "local"),
    )


def measure_sweep_point(
    variant: str,
    model: ModelFunction,
    data: DataSource,
    *,
    config: ProfileConfig,
    loss: LossFunction | None = None,
    model_options: Mapping[str, object] | None = None,
) -> SweepPoint:
    """Profile ``model`` (the variant called ``variant``) on ``data`` as ``config`` says and
    return its sweep point."""
    from torch import nn

    job = ProfiledJob(model=model, data=data, loss=loss or nn.CrossEntropyLoss())
    shape = model_shape(model)
    report = profile_job(config, job, name=variant, model_options=model_options or {}, shape=shape)
    return sweep_point(variant, report, shape.tensor_bytes, config.bucket_mb)


def measure_points(
    variants: Sequence[str],
    measure: Callable[[str], SweepPoint],
    *,
    known: Mapping[str, SweepPoint] | None = None,
    on_point: Callable[[SweepPoint, dict[str, SweepPoint]], None] | None = None,
) -> dict[str, SweepPoint]:
    """Each variant's sweep point: from ``known`` when there, else ``measure(variant)``.

    ``on_point(point, points)`` follows each new point with every point so far (to save them at
    once, so that a long sweep can run in several pieces).
    """
    points = dict(known or {})
    for variant in dict.fromkeys(variants):
        if variant in points:
            continue
        points[variant] = measure(variant)
        if on_point is not None:
            on_point(points[variant], points)
    return points


def load_points(path: Path) -> dict[str, SweepPoint]:
    """The points :func:`save_points` wrote to ``path`` (none when the file does not exist yet)."""
    if not path.exists():
        return {}
    try:
        rows = json.loads(read_text_file(path))  # a binary file: one line naming where
        return {item["variant"]: SweepPoint.from_dict(item) for item in rows}
    except json.JSONDecodeError as exc:
        raise DataFileError(str(path), f"not valid JSON: {exc.msg}", line=exc.lineno) from exc
    except (KeyError, TypeError) as exc:
        raise DataFileError(str(path), f"not a list of sweep points ({exc})") from exc


def save_points(path: Path, points: Mapping[str, SweepPoint]) -> Path:
    """Write ``points`` to ``path`` as JSON (a list, in the mapping's order)."""
    rows = [p.to_dict() for p in points.values()]
    return write_text_atomically(path, json.dumps(rows, indent=1) + "\n")


def sweep_measure(
    variants: Sequence[str],
    config: ProfileConfig,
    *,
    batch: int = 8,
    image_size: int = 32,
    data: str | None = None,
    loss: str | None = None,
    data_workers: int = 0,
) -> Callable[[str], SweepPoint]:
    """Sweep variants (``NAME[:key=value,...]`` zoo models, or model functions of your own:
    ``FILE.py:FUNC``) to the function that profiles each one of them, as
    :func:`unstall.profile.measure_points` wants: on ``data`` (as :func:`resolve_data` takes it,
    the same for every variant; default each zoo variant's synthetic batches) with ``loss``.
    Every variant is resolved now, so that a typo fails before the first minutes-long
    profile."""
    models = {v: resolve_model(v, image_size=image_size) for v in dict.fromkeys(variants)}
    sources = {
        v: resolve_data(data, model, batch=batch, workers=data_workers, image_size=image_size)
        for v, model in models.items()
    }
    loss_fn = resolve_loss(loss)

    def measure(variant: str) -> SweepPoint:
        model = models[variant]
        return measure_sweep_point(
            variant,
            model.build,
            sources[variant],
            config=config,
            loss=loss_fn,
            model_options=model.options,
        )

    return measure
