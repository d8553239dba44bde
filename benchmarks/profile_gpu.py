"""The stall profiler on a GPU: compute time of one training iteration of zoo models (the
profiler's compute run: one worker, NCCL, synthetic batches already on the host), and the
JobProfiles that carry them to ``unstall sim --job-profile`` and ``unstall recommend``.

    python benchmarks/profile_gpu.py [--models resnet50:224:32,...] [--profile-device h100]
        [--profile-dir DIR] [--json OUT]

Each case is ``MODEL:IMAGE_SIZE:BATCH``. PyTorch's defaults hold (fp32 parameters; on Ampere
and later, convolutions in TF32 while matrix products stay fp32): the table prints both flags.
NCCL needs one GPU per rank, so one GPU measures the compute run only; the interconnect and
network stalls need a host with at least two GPUs (``unstall profile run --workers N``).
Without a CUDA GPU the script says so and exits 0 (``make bench`` runs everywhere).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

from unstall.net import preset_for_gpu
from unstall.profile import measure_stalls
from unstall.profile.names import resolve_model, synthetic_data

DEFAULT_CASES = (
    "resnet18:224:32,resnet50:224:32,resnet50:224:64,resnet50:224:128,vgg16:224:32,"
    "transformer:32:64,lstm_lm:32:20,ncf:32:1024"
)


def parse_case(text: str) -> tuple[str, int, int]:
    name, size, batch = text.split(":")
    return name, int(size), int(batch)


def measure(case: str, *, profile_device: str, repeats: int, profile_dir: Path | None) -> Any:
    name, size, batch = parse_case(case)
    model = resolve_model(name, image_size=size)
    report = measure_stalls(
        model.build,
        synthetic_data(model, batch=batch),
        workers=1,
        device="cuda",
        profile_device=profile_device,
        iterations=20,
        warmup=5,
        repeats=repeats,
        name=name,
        model_options=model.options,
    )
    if profile_dir is not None:
        profile_dir.mkdir(parents=True, exist_ok=True)
        report.job_profile.save(profile_dir / f"{name}_{size}_b{batch}.json")
    run = report.runs["compute"]
    return {
        "model": name,
        "image_size": size,
        "batch": batch,
        "compute_s": report.compute_s,
        "compute_min_s": run.min_s,
        "compute_max_s": run.max_s,
        "samples_per_s": batch / report.compute_s,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=DEFAULT_CASES, help="MODEL:IMAGE_SIZE:BATCH,...")
    parser.add_argument("--profile-device", default=None, help="preset (default: from the GPU)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--profile-dir", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("profile_gpu: needs a CUDA GPU; none here, nothing measured")
        return 0
    gpu = torch.cuda.get_device_name(0)
    device = args.profile_device or preset_for_gpu(gpu)
    if device is None:
        parser.error(f"no device preset for {gpu!r}: give --profile-device")
    tf32 = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    print(f"{gpu} (preset {device}); TF32 convolutions {tf32[0]}, TF32 matmul {tf32[1]}")
    header = ("model", "image", "batch", "compute ms", "spread ms", "samples/s")
    print("{:<12} {:>5} {:>6} {:>11} {:>10} {:>10}".format(*header))
    rows = []
    for case in args.models.split(","):
        started = time.perf_counter()
        row = measure(
            case, profile_device=device, repeats=args.repeats, profile_dir=args.profile_dir
        )
        rows.append(row)
        spread = 1e3 * (row["compute_max_s"] - row["compute_min_s"])
        print(
            f"{row['model']:<12} {row['image_size']:>5} {row['batch']:>6} "
            f"{1e3 * row['compute_s']:>11.2f} {spread:>10.2f} {row['samples_per_s']:>10.0f}"
            f"   ({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    if args.json is not None:
        meta = {"gpu": gpu, "preset": device, "tf32_cudnn": tf32[0], "tf32_matmul": tf32[1]}
        args.json.write_text(json.dumps({**meta, "rows": rows}, indent=1) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
