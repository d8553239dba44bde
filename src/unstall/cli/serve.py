"""`unstall serve`: the scheduler service, until Ctrl-C."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from unstall.cli.common import Interrupted, err_console, handle_errors
from unstall.cli.sim_run import PolicyOpt, PolicyOptionOpt
from unstall.cli.sim_text import parse_pairs


@handle_errors
def serve(
    policy: PolicyOpt = "dally",
    policy_option: PolicyOptionOpt = None,
    cluster: Annotated[
        str,
        typer.Option(
            "--cluster",
            help="Topology the policies see: a preset (tiny, small, medium, philly) or a "
            "TOML/JSON file; without --address its nodes are emulated on a local Ray.",
        ),
    ] = "tiny",
    address: Annotated[
        str | None,
        typer.Option(
            "--address",
            help="Join this Ray cluster (HOST:PORT; default RAY_ADDRESS) instead of a local one.",
        ),
    ] = None,
    compute: Annotated[
        str,
        typer.Option(
            "--compute", help="emulated (the perf model's times) or real (PyTorch training)."
        ),
    ] = "emulated",
    speedup: Annotated[
        float,
        typer.Option("--speedup", help="Run seconds per wall second (emulated compute)."),
    ] = 1.0,
    store: Annotated[
        Path,
        typer.Option(
            "--store", help="Store directory: the jobs' records, code, logs, checkpoints."
        ),
    ] = Path("~/.unstall/service"),
    database: Annotated[
        str | None,
        typer.Option("--database", help="postgresql://... for the records (default: SQLite)."),
    ] = None,
    host: Annotated[
        str, typer.Option("--host", help="Address to answer on; others than loopback need a token.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="HTTP port.")] = 8470,
    token_file: Annotated[
        Path | None,
        typer.Option("--token-file", help="Lines TOKEN (an admin) or TOKEN USER: who may call."),
    ] = None,
    max_failures: Annotated[
        int, typer.Option("--max-failures", min=1, help="Failures in a row before a job ends.")
    ] = 3,
    checkpoint_every_s: Annotated[
        float,
        typer.Option(
            "--checkpoint-every-s", min=0.01, help="Wall seconds between a job's checkpoints."
        ),
    ] = 5.0,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the policy and the data.")] = 0,
) -> None:
    """Run the scheduler service: users submit jobs (unstall jobs ...), the policy places them.

    It answers on http://HOST:PORT (API at /api, OpenAPI at /docs) until Ctrl-C; the store
    keeps every job, and a service started again on it resumes them. See docs/service.md.
    """
    from unstall.live import LiveConfig
    from unstall.net import resolve_cluster
    from unstall.sched import resolve_policy
    from unstall.service.serve import ServeConfig
    from unstall.service.serve import serve as run_service
    from unstall.service.service import read_tokens

    tokens = read_tokens(token_file) if token_file is not None else None
    chosen = resolve_policy(
        policy, parse_pairs(policy_option or [], "--policy-option", "KEY=VALUE"), owner="serve"
    )
    live = LiveConfig(speedup=speedup, compute=compute, max_failures=max_failures, seed=seed)
    config = ServeConfig(host=host, port=port, store=store.expanduser(), database=database)

    def say(text: str) -> None:
        err_console.print(text, highlight=False, markup=False)

    try:
        run_service(
            topology=resolve_cluster(cluster, owner="serve"),
            policy=chosen,
            live=live,
            config=config,
            address=address,
            tokens=tokens,
            say=lambda text: (
                print(text, flush=True) if text.startswith("serving on") else say(text)
            ),
        )
    except KeyboardInterrupt:
        raise Interrupted("stopped; every job is kept in the store") from None
