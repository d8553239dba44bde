"""Hand-picked mutations the test suite must kill, for the code the scheduling core will move.

Each mutation replaces one exact snippet of one source file (it must occur exactly once) and
names the test files that must notice. The mutations are applied one at a time to a scratch copy
of the tree under /tmp (never to the tree itself); the named tests run against that copy
(``PYTHONPATH`` = its ``src``); a mutation is *killed* when they fail (or run past the time
limit: a guard taken away may loop for ever), *survived* when they pass. A table is printed and
the exit status is 1 if any survived, 2 if a snippet is no longer found (the code moved: update
the entry).

    python scripts/mutation_check.py                 # every mutation
    python scripts/mutation_check.py -k engine       # those whose name contains "engine"
    python scripts/mutation_check.py --list          # names only

When the code moves, edit the entries below: one entry is a few lines.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What a scratch copy needs to run the tests (the rest of the tree is not read by them).
COPIED = ("src", "tests", "examples", "benchmarks", "docs", "README.md", "pyproject.toml")
# Per mutation: a mutant that loops for ever is killed by this limit.
LIMIT_S = 600


@dataclass(frozen=True, kw_only=True)
class Mutation:
    name: str
    file: str  # relative to the repository root
    original: str  # exact text, found exactly once in the file
    replacement: str
    tests: tuple[str, ...]  # test files or node ids, relative to the root
    limit_s: float = 180.0


# The scheduling core (the round, the job state machine), the simulator's driver, the decision
# checks and the live driver.
CORE = "src/unstall/loop/core.py"
ENGINE = "src/unstall/sim/engine.py"
CHECKS = "src/unstall/loop/checks.py"
LIVE = "src/unstall/live/driver.py"
ENGINE_TESTS = (
    "tests/sim/test_engine.py",
    "tests/sim/test_job_states.py",
    "tests/loop/test_core.py",
)
CHECK_TESTS = ("tests/sim/test_engine.py", "tests/sim/test_decision_shapes.py")
LIVE_PREEMPT = (
    "tests/live/test_live_cluster.py::"
    "test_a_job_preempted_and_migrated_ends_with_the_parameters_of_an_uninterrupted_run",
)

MUTATIONS: tuple[Mutation, ...] = (
    # --- the engine's round ------------------------------------------------------------------
    Mutation(
        name="core: no MAX_ROUNDS guard",
        file=CORE,
        original="if self._rounds_at_instant > MAX_ROUNDS_AT_ONE_INSTANT:",
        replacement="if False:",
        tests=ENGINE_TESTS,
        limit_s=60.0,
    ),
    Mutation(
        name="core: round count at an instant never reset",
        file=CORE,
        original="if now != self._round_at or self._finished_since_round:",
        replacement="if self._round_at == -math.inf:",
        tests=ENGINE_TESTS,
    ),
    Mutation(
        name="core: a timer before now accepted",
        file=CORE,
        original="if timer.at_s < decided_at:",
        replacement="if timer.at_s < decided_at - 1e18:",
        tests=ENGINE_TESTS,
    ),
    Mutation(
        name="core: preemptions not counted",
        file=CORE,
        original="            job.preemptions += 1\n            self.preemptions += 1\n",
        replacement="",
        tests=ENGINE_TESTS,
    ),
    Mutation(
        name="engine: restart after preemption pays no restore",
        file=ENGINE,
        original="pause = self.settings.restore_s\n",
        replacement="pause = 0.0\n",
        tests=ENGINE_TESTS,
    ),
    Mutation(
        name="engine: migration pays no restore",
        file=ENGINE,
        original="restoring = migrating or job.preemptions > 0",
        replacement="restoring = job.preemptions > 0",
        tests=ENGINE_TESTS,
    ),
    Mutation(
        name="core: migrations not counted",
        file=CORE,
        original="        job.migrations += 1\n        self.migrations += 1\n",
        replacement="",
        tests=ENGINE_TESTS,
    ),
    # --- the job state machine ---------------------------------------------------------------
    Mutation(
        name="state: a job may arrive twice",
        file=CORE,
        original="if job.state != JobState.PENDING:",
        replacement="if False:",
        tests=ENGINE_TESTS,
    ),
    Mutation(
        name="state: a job may start before it arrives",
        file=CORE,
        original="if now < job.submit_s:",
        replacement="if False:",
        tests=ENGINE_TESTS,
    ),
    Mutation(
        name="state: finishing leaves done_iters as it was",
        file=CORE,
        original="        job.done_iters = job.work_iters\n        job.state = JobState.DONE\n",
        replacement="        job.state = JobState.DONE\n",
        tests=ENGINE_TESTS,
    ),
    # --- the decision checks -----------------------------------------------------------------
    Mutation(
        name="checks: a job started twice in one decision",
        file=CHECKS,
        original="twice = _first_repeat(ids)",
        replacement="twice = None",
        tests=CHECK_TESTS,
    ),
    Mutation(
        name="checks: a node twice in one placement",
        file=CHECKS,
        original="if node in seen:",
        replacement="if False:",
        tests=CHECK_TESTS,
    ),
    Mutation(
        name="checks: more GPUs than a node has free",
        file=CHECKS,
        original="if k > free:",
        replacement="if k > free + 1:",
        tests=CHECK_TESTS,
    ),
    Mutation(
        name="checks: a placement of the wrong size",
        file=CHECKS,
        original="if total != job.num_gpus:",
        replacement="if total > job.num_gpus:",
        tests=CHECK_TESTS,
    ),
    Mutation(
        name="checks: a timer at NaN",
        file=CHECKS,
        original="or not math.isfinite(timer.at_s):",
        replacement="or math.isinf(timer.at_s):",
        tests=CHECK_TESTS,
        limit_s=40.0,  # the mutant loops for ever on the NaN timer
    ),
    # --- live preempt / migrate --------------------------------------------------------------
    Mutation(
        name="core: a preempted job requeued as not preempted",
        file=CORE,
        original='self._requeue(job, at, preempted=verb == "preempt")',
        replacement="self._requeue(job, at, preempted=False)",
        tests=(*ENGINE_TESTS, *LIVE_PREEMPT),
        limit_s=420.0,
    ),
    Mutation(
        name="live: a moved job resumes from scratch, not its checkpoint",
        file=LIVE,
        original="held = self.pool.store.load.remote(job.job_id) if job.done_iters > 0 else None",
        replacement="held = None",
        tests=LIVE_PREEMPT,
        limit_s=420.0,
    ),
    Mutation(
        name="live: a stopped segment keeps its executors",
        file=LIVE,
        original="        self.pool.give_back(segment.executors)\n",
        replacement="",
        # A 2-GPU job that fails and starts again on a node of 2 GPUs needs its slots back.
        tests=(
            *LIVE_PREEMPT,
            "tests/live/test_live_cluster.py::"
            "test_a_killed_process_sends_its_job_back_from_its_last_checkpoint",
        ),
        limit_s=420.0,
    ),
)


def scratch_copy(root: Path) -> Path:
    """The parts of the tree the tests read, copied under /tmp."""
    where = Path(tempfile.mkdtemp(prefix="unstall-mutants-")) / "repo"
    where.mkdir()
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache", "*.egg-info")
    for name in COPIED:
        source = root / name
        if source.is_dir():
            shutil.copytree(source, where / name, ignore=ignore)
        elif source.exists():
            shutil.copy2(source, where / name)
    return where


def apply(copy: Path, mutation: Mutation) -> str:
    """Write the mutant into the copy; returns the file's original text."""
    path = copy / mutation.file
    text = path.read_text()
    found = text.count(mutation.original)
    if found != 1:
        raise LookupError(
            f"{mutation.name}: the snippet occurs {found} times in {mutation.file} (must be "
            f"once): update the entry in scripts/mutation_check.py\n{mutation.original!r}"
        )
    path.write_text(text.replace(mutation.original, mutation.replacement))
    return text


def run_tests(copy: Path, mutation: Mutation, python: str) -> tuple[str, float, str]:
    """``killed`` (the tests failed or ran past the limit) or ``survived``; wall seconds; the
    first test that failed."""
    env = {**os.environ, "PYTHONPATH": str(copy / "src"), "PYTHONDONTWRITEBYTECODE": "1"}
    command = [python, "-m", "pytest", "-q", "-x", "-n", "0", "-p", "no:cacheprovider"]
    command += ["-m", "slow or not slow", *mutation.tests]
    began = time.monotonic()
    try:
        done = subprocess.run(
            command,
            cwd=copy,
            env=env,
            capture_output=True,
            text=True,
            timeout=min(mutation.limit_s, LIMIT_S),
        )
    except subprocess.TimeoutExpired:
        return "killed (time limit)", time.monotonic() - began, ""
    took = time.monotonic() - began
    if done.returncode == 0:
        return "survived", took, ""
    failed = [line for line in done.stdout.splitlines() if line.startswith("FAILED ")]
    if done.returncode == 1 and failed:
        return "killed", took, failed[0].split()[1]
    # Errors only (a fixture that could not start, a test that could not be collected) or
    # pytest not running the tests at all: no verdict on the mutant.
    raise RuntimeError(f"{mutation.name}: pytest exited {done.returncode}\n{done.stdout[-3000:]}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", default="", help="only mutations whose name contains this")
    parser.add_argument("--list", action="store_true", help="print the mutations' names")
    args = parser.parse_args()
    chosen = [m for m in MUTATIONS if args.k in m.name]
    if args.list:
        print("\n".join(m.name for m in chosen))
        return 0
    copy = scratch_copy(ROOT)
    rows: list[tuple[str, str, float, str]] = []
    try:
        for mutation in chosen:
            original = apply(copy, mutation)
            try:
                verdict, took, by = run_tests(copy, mutation, sys.executable)
            finally:
                (copy / mutation.file).write_text(original)
            rows.append((mutation.name, verdict, took, by))
            print(f"{verdict:20} {took:6.1f} s  {mutation.name}  {by}", flush=True)
    except LookupError as exc:
        print(exc, file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(copy.parent, ignore_errors=True)
    width = max(len(name) for name, *_ in rows)
    print(f"\n| {'mutation':{width}} | verdict             | seconds | first test that failed")
    print(f"|{'-' * (width + 2)}|---------------------|---------|------------------------")
    for name, verdict, took, by in rows:
        print(f"| {name:{width}} | {verdict:19} | {took:7.1f} | {by}")
    survivors = [name for name, verdict, *_ in rows if verdict == "survived"]
    print(f"\n{len(rows) - len(survivors)} of {len(rows)} killed")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
