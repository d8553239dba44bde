"""Per-job comparison of Dally with strict consolidation on the synthetic trace of
``dally_eval.py``: by size class, the mean JCT difference and queue times, and the jobs Dally
preempted against the rest (where does Dally win or lose against ``consolidate``?). Dally here
is ``dally-fixed``: fixed settings, without the look-ahead tuner that the policy ``dally`` adds.

    .venv/bin/python benchmarks/dally_perjob.py --congestion high [--order las]
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from dally_eval import DALLY, Job, load_trace


def jobs_of(policy: str, congestion: str, order: str | None) -> pd.DataFrame:
    from unstall.sim import SimRequest, simulate_request

    options = (("order", order),) if (policy == DALLY and order) else ()
    trace = load_trace(Job("synthetic-multi-gpu", "medium", congestion, policy, 3000))
    request = SimRequest(
        policy=policy, policy_options=options, cluster="medium", congestion=congestion, seed=1
    )
    return simulate_request(request, trace).jobs.set_index("job_id")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--congestion", default="high")
    parser.add_argument("--order", default=None, help="Dally's queue order (default: its own)")
    args = parser.parse_args()
    ours = jobs_of(DALLY, args.congestion, args.order)
    theirs = jobs_of("consolidate", args.congestion, None)
    d = ours.join(theirs[["jct_s", "queue_s"]].add_suffix("_consolidate"))
    d["diff_h"] = (d["jct_s"] - d["jct_s_consolidate"]) / 3600
    d["size_class"] = 2 ** np.floor(np.log2(d["num_gpus"])).astype(int)
    by_class = d.groupby("size_class").agg(
        jobs=("diff_h", "size"),
        jct_diff_h=("diff_h", "mean"),
        queue_h=("queue_s", lambda x: x.mean() / 3600),
        queue_consolidate_h=("queue_s_consolidate", lambda x: x.mean() / 3600),
        preemptions=("preemptions", "sum"),
    )
    print(f"average JCT difference ({DALLY} - consolidate): {d['diff_h'].mean():+.2f} h a job")
    print(by_class.round(2).to_string())
    hit = d["preemptions"] > 0
    print(
        f"jobs preempted at least once: {int(hit.sum())}, {d.loc[hit, 'diff_h'].mean():+.1f} h "
        f"each (queue {d.loc[hit, 'queue_s'].mean() / 3600:.1f} h vs "
        f"{d.loc[hit, 'queue_s_consolidate'].mean() / 3600:.1f} h); "
        f"the others: {d.loc[~hit, 'diff_h'].mean():+.2f} h each"
    )


if __name__ == "__main__":
    main()
