"""One big instance or several small ones at the same GPU count: predicted time and cost.

For each model, the 8-GPU configurations of the p3 (V100) and g4dn (T4) families of the shipped
AWS catalog: one 8-GPU instance, two 4-GPU instances, eight 1-GPU instances. Prints a table and
writes the rows as JSON.

    .venv/bin/python benchmarks/cost_one_big_vs_many_small.py --json /tmp/cost_big_small.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from unstall.cost import TrainingConfig, predict_all, resolve_catalog, resolve_job

CONFIGURATIONS = [
    ("p3.16xlarge", 1),
    ("p3.8xlarge", 2),
    ("p3.2xlarge", 8),
    ("g4dn.metal", 1),
    ("g4dn.12xlarge", 2),
    ("g4dn.xlarge", 8),
]


def rows(models: list[str], samples: int, epochs: float) -> list[dict[str, object]]:
    catalog = resolve_catalog()
    training = TrainingConfig(samples=samples, epochs=epochs)
    instances = [catalog.get(name) for name in dict.fromkeys(n for n, _ in CONFIGURATIONS)]
    most = max(count for _, count in CONFIGURATIONS)
    out: list[dict[str, object]] = []
    for model in models:
        job = resolve_job(model, catalog)
        # Every count up to the largest of each type; the configurations are picked from them.
        predicted = predict_all(job, instances, training, max_instances=most)
        by_configuration = {(p.instance, p.count): p for p in predicted}
        for name, count in CONFIGURATIONS:
            p = by_configuration[(name, count)]
            out.append(
                {
                    "model": model,
                    "configuration": p.label,
                    "gpus": p.gpus,
                    "usd_per_hour": p.usd_per_hour,
                    "iteration_s": p.iteration_s,
                    "comm_stall_share": p.comm_stall_share,
                    "slowest_link": p.slowest_link,
                    "predicted_hours": p.predicted_hours,
                    "predicted_cost_usd": p.predicted_cost_usd,
                }
            )
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet50", "vgg16"])
    parser.add_argument("--samples", type=int, default=1_281_167)
    parser.add_argument("--epochs", type=float, default=90.0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    start = time.perf_counter()
    table = rows(args.models, args.samples, args.epochs)
    elapsed = time.perf_counter() - start
    print("| model | configuration | GPUs | $/h | s/iter | comm stall | hours | cost $ |")
    print("|---|---|---:|---:|---:|---|---:|---:|")
    for r in table:
        stall = f"{r['comm_stall_share']:.0%} {r['slowest_link']}"
        print(
            f"| {r['model']} | {r['configuration']} | {r['gpus']} | {r['usd_per_hour']:.2f} | "
            f"{r['iteration_s']:.3f} | {stall} | {r['predicted_hours']:,.1f} | "
            f"{r['predicted_cost_usd']:,.0f} |"
        )
    print(f"({len(table)} predictions in {elapsed:.2f} s, zoo facts included)")
    if args.json is not None:
        args.json.write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
