"""What `sim run` and `sim compare` say on stderr beside their tables: jobs rejected, left
unfinished, and options that had no job to act on."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.markup import escape

from unstall.cli.common import err_console

if TYPE_CHECKING:
    from unstall.sim import SimRequest, SimRun
    from unstall.traces import Trace

REJECTED_NAMED = 20  # rejected jobs named on stderr; the per-job output lists them all


def report_rejected(outcome: SimRun) -> None:
    """Name on stderr the jobs that could never fit the cluster (they were not simulated), and
    say so when no job ran at all: the table's zeros are then no measurement."""
    jobs = outcome.jobs
    rejected = jobs[jobs["outcome"] == "rejected"]
    if jobs.empty:
        err_console.print(
            "[bold yellow]warning:[/] the trace holds no jobs: nothing was simulated and every "
            "figure below is 0",
            highlight=False,
            soft_wrap=True,
        )
        return
    if rejected.empty:
        return
    named = ", ".join(
        f"{job_id} ({gpus} GPUs)"
        for job_id, gpus in zip(
            rejected["job_id"][:REJECTED_NAMED], rejected["num_gpus"], strict=False
        )
    )
    more = f" and {len(rejected) - REJECTED_NAMED} more" if len(rejected) > REJECTED_NAMED else ""
    err_console.print(
        f"[bold yellow]warning:[/] {len(rejected)} "
        f"{'job needs' if len(rejected) == 1 else 'jobs need'} more than the cluster's "
        f"{outcome.result.total_gpus} GPUs and {'was' if len(rejected) == 1 else 'were'} "
        "rejected (outcome 'rejected' in the per-job "
        f"output): {named}{more}",
        highlight=False,
        soft_wrap=True,
    )
    if len(rejected) == len(jobs):
        err_console.print(
            "[bold yellow]warning:[/] no job fits the cluster: nothing was simulated and every "
            "figure below is 0",
            highlight=False,
            soft_wrap=True,
        )


def report_unfinished(outcome: SimRun, label: str) -> None:
    """Say on stderr how many jobs the run left unfinished: the policy never started them (or
    never restarted them) before nothing else was left to happen. The figures cover finished
    jobs only, so a policy that starts nothing would otherwise read as a perfect 0."""
    r = outcome.result
    simulated = r.jobs - r.jobs_rejected
    unfinished = simulated - r.jobs_finished
    if unfinished <= 0:
        return
    err_console.print(
        f"[bold yellow]warning:[/] {escape(label)} left {unfinished} of {simulated} jobs "
        "unfinished: they were still waiting when nothing else was left to happen (outcome "
        "'unfinished' in the per-job output); the figures below count finished jobs only",
        highlight=False,
        soft_wrap=True,
    )


def report_unused_models(outcome: SimRun, request: SimRequest, trace: Trace) -> None:
    """Say on stderr when --model-mix or a --job-profile had no job to act on: the mix only
    draws models for jobs whose trace names none, and a profile only changes the jobs of its
    model. Both went unused without a word on a trace that names every job's model."""
    from unstall.sim import read_job_profiles

    simulated = trace.jobs["model"].iloc[: request.max_jobs]
    if request.model_mix is not None and simulated.notna().all():
        err_console.print(
            "[bold yellow]warning:[/] --model-mix is unused: every job of this trace names its "
            "model (the mix draws models only for jobs that name none)",
            highlight=False,
            soft_wrap=True,
        )
    ran = set(outcome.jobs["model"].dropna())
    for path, profile in zip(
        request.job_profiles, read_job_profiles(request.job_profiles), strict=True
    ):
        if profile.model not in ran:
            err_console.print(
                f"[bold yellow]warning:[/] --job-profile {escape(str(path))} is unused: no "
                f"simulated job runs its model {escape(profile.model)!r} (give it a share in "
                "--model-mix, for a trace whose jobs name no model)",
                highlight=False,
                soft_wrap=True,
            )
