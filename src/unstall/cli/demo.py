"""`unstall demo`: each built part at work on the embedded default data, in a few minutes.

Every section calls the same functions as the real commands, on small inputs, and says which
command to run for the full-size version. Plots and JSON land in ``--out`` (default out/demo).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Annotated, Any

import typer

from unstall.cli.common import QuietOpt, console


def _zoo(out: Path, quiet: bool) -> None:
    from unstall.cli.common import save_json
    from unstall.cli.sim import print_models_table
    from unstall.workload import facts_table

    zoo = facts_table(224)
    print_models_table(zoo.models, 224)
    save_json(out / "zoo.json", zoo, {"image_size": 224, "model": None})
    console.print("full table and per-tensor view: `unstall sim models [--model resnet50]`")


def _perf(out: Path, quiet: bool) -> None:
    from unstall.cli.common import table
    from unstall.net import resolve_cluster
    from unstall.workload import Placement, iteration_time, spec_for

    topo = resolve_cluster("small")
    rows = []
    for model in ("resnet50", "vgg16", "lstm_lm"):
        spec = spec_for(model, topo.device)
        for label, placement, congestion in (
            ("4 (one node)", Placement.parse("4"), 0.0),
            ("22 (two nodes)", Placement.parse("22"), 0.0),
            ("1111 (four nodes)", Placement.parse("1111"), 0.0),
            ("22, 50% congestion", Placement.parse("22"), 0.5),
        ):
            t = iteration_time(spec, placement, topo, congestion=congestion)
            rows.append([model, label, t.total_s * 1e3, t.comm_s * 1e3, str(t.bottleneck)])
    console.print(
        table(
            f"perf model: 4 GPUs of the '{topo.name}' cluster ({topo.device}, "
            f"{topo.nic.bandwidth_gbps:g} Gbps NICs at {topo.network_efficiency:.0%} efficiency)",
            ["model", "placement", "iteration ms", "comm ms", "bottleneck"],
            rows,
        )
    )
    console.print("fit to measured data: `unstall sim calibrate --placements DIR`")


def _trace(out: Path, quiet: bool) -> None:
    from unstall.cli.trace import print_summary
    from unstall.traces import default_trace

    print_summary(default_trace().summary(top=5))


def _sim(out: Path, quiet: bool) -> None:
    from unstall.cli.sim_run import (
        dally_in_context,
        print_tuner_courses,
        simulate_all,
        write_comparison,
    )
    from unstall.sched import POLICIES, make_policy
    from unstall.sim import SimRequest
    from unstall.traces import resolve_trace

    requests = [SimRequest(policy=name, cluster="small", congestion="medium") for name in POLICIES]
    trace = resolve_trace(None)
    runs = simulate_all(requests, trace, quiet)
    write_comparison(runs, requests, "embedded", out / "sim")
    print_tuner_courses(runs)
    dally_in_context([r.result for r in runs], trace)
    oracles = {name for name in POLICIES if make_policy(name).needs_oracle}
    courses: list[Any] = []
    per_trace = _simulate_like_traces(list(POLICIES), "medium", quiet, courses=courses)
    _dally_over_like_traces(per_trace, oracles)
    _dally_over_like_traces(per_trace, oracles, policy="dally-fixed")
    _tuner_over_like_traces(courses)
    console.print("on a real trace: `unstall sim compare --trace philly_jobs.csv --cluster philly`")


# Traces generated like the embedded one (``lookalike_trace_config``), to tell what of dally's
# standing on that one trace is its draw; `benchmarks/dally_long.py --shape default` runs the
# same with 20 traces at every congestion level (same traces, same per-trace simulation seed).
LIKE_TRACES = 8


def _simulate_like_traces(
    policies: list[str],
    congestion: str,
    quiet: bool,
    traces: int = LIKE_TRACES,
    courses: list[Any] | None = None,
) -> list[list[Any]]:
    """Every policy on each of ``traces`` traces generated like the embedded one: a list of
    results per trace (``courses``, when given, gets the course of each run that had a
    look-ahead tuner)."""
    from unstall.cli.common import progress_bar
    from unstall.sim import SimRequest, simulate_request
    from unstall.sim.lookahead import tuner_course
    from unstall.traces import generate, lookalike_trace_config

    per_trace: list[list[Any]] = []
    with progress_bar("traces like the embedded one", traces * len(policies), quiet) as advance:
        for i in range(traces):
            trace = generate(lookalike_trace_config(i))
            results = []
            for name in policies:
                request = SimRequest(policy=name, cluster="small", congestion=congestion, seed=i)
                run = simulate_request(request, trace)
                results.append(run.result)
                course = tuner_course(run.telemetry) if courses is not None else None
                if course is not None:
                    courses.append(course)  # type: ignore[union-attr]
                advance(1)
            per_trace.append(results)
    return per_trace


def _dally_over_like_traces(
    per_trace: list[list[Any]], oracles: Collection[str] = (), policy: str = "dally"
) -> None:
    """Dally (or ``policy``, one of its family) against the best other policy of each trace,
    per metric, as the mean and spread over the traces, and which policy was that best how
    often (``oracles``: policies that know each job's run time, marked so)."""
    import statistics
    from collections import Counter

    if not per_trace:
        return
    from unstall.cli.sim_run import CONTEXT_METRICS, DALLY_FAMILY

    ratios: dict[str, list[float]] = {metric: [] for metric, _ in CONTEXT_METRICS}
    best_by: dict[str, Counter[str]] = {metric: Counter() for metric, _ in CONTEXT_METRICS}
    for results in per_trace:
        dally = next((r for r in results if r.policy == policy), None)
        others = [r for r in results if r.policy not in DALLY_FAMILY]
        if dally is None or not others:
            return
        for metric, _ in CONTEXT_METRICS:
            best = min(others, key=lambda r: getattr(r, metric))
            ours, theirs = getattr(dally, metric), getattr(best, metric)
            ratios[metric].append(1.0 if ours == theirs else ours / theirs if theirs else 1.0)
            best_by[metric][best.policy] += 1
    parts = []
    for metric, label in CONTEXT_METRICS:
        values = ratios[metric]
        spread = statistics.stdev(values) if len(values) > 1 else 0.0
        winners = ", ".join(
            f"{name}{' (oracle)' if name in oracles else ''} {count}"
            for name, count in best_by[metric].most_common()
        )
        parts.append(
            f"{label} {statistics.fmean(values):.3f} ± {spread:.3f} "
            f"(range {min(values):.3f}-{max(values):.3f}; best other: {winners})"
        )
    from unstall.traces import LOOKALIKE_FIRST_SEED

    n = len(per_trace)
    why = ""
    if policy != "dally":  # a second line, after dally's: the traces and the reading are said
        console.print(
            f"{policy} on the same traces: {'; '.join(parts)}.",
            highlight=False,
        )
        return
    if best_by["avg_jct_s"].get("tiresias"):
        why = (
            " Tiresias preempts running jobs to start every new one; dally's fixed settings"
            " preempt only to consolidate a sensitive job or to start a job larger than a node,"
            " and its tuner turns preemption for service on where its look-ahead predicts a"
            " gain."
        )
    console.print(
        f"on {n} traces generated like it (generator seeds {LOOKALIKE_FIRST_SEED}-"
        f"{LOOKALIKE_FIRST_SEED + n - 1}, same congestion), dally over the best other policy of "
        f"each trace, mean ± sd: {'; '.join(parts)}. Below 1: dally better.{why} More seeds and "
        "levels: `benchmarks/dally_long.py --shape default`.",
        highlight=False,
    )


def _tuner_over_like_traces(courses: list[Any]) -> None:
    """What the look-ahead tuner chose over the traces generated like the embedded one."""
    from collections import Counter

    if not courses:
        return
    finals = Counter(c.final for c in courses if c.switches)
    switched = sum(finals.values())
    tunings = [c.tunings for c in courses]
    console.print(
        f"its tuner there: {min(tunings)}-{max(tunings)} tunings a run; switched on {switched} of "
        f"{len(courses)} traces"
        + (
            " (ending on " + ", ".join(f"{name} {n}" for name, n in finals.most_common()) + ")"
            if switched
            else ""
        )
        + f", kept its first setting ({courses[0].first}) on {len(courses) - switched}.",
        highlight=False,
    )


def _live(out: Path, quiet: bool) -> None:
    from unstall.cli.common import err_console, save_json
    from unstall.cli.live import print_live
    from unstall.live import LiveConfig, run_live
    from unstall.net import TopologyConfig
    from unstall.sched import make_policy
    from unstall.sim import simulate
    from unstall.traces import default_trace

    # The embedded trace's first jobs on two emulated nodes of two GPUs (one local Ray node
    # each, on loopback), compressed to about 15 s of wall time.
    cluster = TopologyConfig(name="demo-two-nodes", racks=2, nodes_per_rack=1, gpus_per_node=2)
    trace, jobs = default_trace(), 6
    planned = simulate(trace, cluster, make_policy("consolidate"), max_jobs=jobs)
    speedup = max(1.0, planned.result.makespan_s / 15.0)

    def say(text: str) -> None:
        if not quiet:
            err_console.print(text, highlight=False, markup=False)

    run = run_live(
        trace,
        make_policy("consolidate"),
        cluster=cluster,
        config=LiveConfig(speedup=speedup),
        max_jobs=jobs,
        predict=True,
        log=say,
    )
    print_live(run)
    save_json(out / "live.json", run, {"policy": "consolidate", "max_jobs": jobs})
    console.print(
        "on your own Ray cluster: `unstall live run --address HOST:PORT --policy dally --trace "
        "jobs.csv` (docs/live.md); the simulator measured against it: "
        "`benchmarks/live_fidelity.py`"
    )


def _service(out: Path, quiet: bool) -> None:
    import shutil

    from unstall.cli.common import err_console
    from unstall.cli.jobs import print_jobs, print_whatif
    from unstall.live import LiveConfig
    from unstall.net import TopologyConfig
    from unstall.sched import make_policy
    from unstall.service import Client, ServeConfig, serving

    # A service on two emulated nodes of two GPUs, a fresh store, a free port; six jobs.
    store = out / "service-store"
    shutil.rmtree(store, ignore_errors=True)
    cluster = TopologyConfig(name="demo-two-nodes", racks=2, nodes_per_rack=1, gpus_per_node=2)

    def say(text: str) -> None:
        if not quiet:
            err_console.print(text, highlight=False, markup=False)

    with serving(
        topology=cluster,
        policy=make_policy("dally"),
        live=LiveConfig(speedup=60.0, checkpoint_every_s=1.0),
        config=ServeConfig(port=0, store=store),
        say=say,
    ) as running:
        client = Client(running.url, user="demo")
        sizes = [
            (2, "resnet50", 600),
            (2, "vgg16", 300),
            (4, "resnet50", 300),
            (1, "lstm_lm", 240),
            (1, "resnet18", 120),
            (2, "bert", 200),
        ]
        jobs = [
            client.submit(gpus=gpus, model=model, duration_s=seconds, name=f"{model}-{i}")
            for i, (gpus, model, seconds) in enumerate(sizes)
        ]
        client.wait_ready()  # the executors come up, the jobs are taken in
        deadline = time.monotonic() + 10  # the first forecast gives the waiting jobs estimates
        while time.monotonic() < deadline and not any(
            r.estimated_start is not None for r in client.list(state="pending")
        ):
            time.sleep(0.5)
        console.print(f"the queue, a few seconds after six submissions ({running.url}):")
        print_jobs(client.list())
        console.print("the same queue forecast under two other policies (`unstall jobs whatif`):")
        print_whatif(client.whatif(["fifo", "tiresias"]))
        client.cancel(jobs[-1].id)
        for job in jobs[:-1]:
            client.wait(job.id, timeout_s=300)
        console.print("after they ran (the last one cancelled):")
        print_jobs(client.list())
    console.print(
        f"store kept in {store}/ (jobs.db, logs/, checkpoints/); yours: `unstall serve` then "
        "`unstall jobs submit --gpus 2 --model resnet50 --duration-s 600` (docs/service.md)"
    )


def _sparse_lstm(out: Path, quiet: bool) -> None:
    from unstall.cli.common import progress_bar, save_json
    from unstall.cli.sparse_tables import lstm_bench_table
    from unstall.sparse import LSTMBenchConfig, bench_lstm_step

    config = LSTMBenchConfig(
        hidden=512,
        batch=32,
        p=0.5,
        seq_len=20,
        num_layers=1,
        repeats=3,
        modes=("standard", "structured"),
        with_nn_lstm=False,
    )
    with progress_bar("LSTM steps", config.timed_steps, quiet) as advance:
        result = bench_lstm_step(config, advance)
    console.print(lstm_bench_table(result))
    save_json(out / "lstm_bench.json", result, config)
    console.print(
        "full size: `unstall sparse lstm-bench --hidden 1024 --batch 64 --p 0.5`; "
        "training on Penn Treebank: `unstall sparse lstm-train --mode structured --p 0.5`"
    )


def _recommend(out: Path, quiet: bool) -> None:

    from unstall.cli.common import progress_bar
    from unstall.cli.recommend import show_recommendation
    from unstall.cost import recommend, recommend_config, resolve_catalog, resolve_job

    config = recommend_config(samples=1_281_167, epochs=90, budget_hours=24)
    catalog = resolve_catalog()
    job = resolve_job("resnet50", catalog, precision="fp32")
    with progress_bar("predicting", len(catalog), quiet) as advance:
        rec = recommend(job, config, catalog=catalog, on_instance=lambda _: advance(1))
    inputs = {"profile": None, "model": "resnet50", "catalog": catalog.source, "precision": "fp32"}
    show_recommendation(
        rec,
        top=8,
        plot=out / "recommend_pareto.png",
        json_path=out / "recommend.json",
        config={**inputs, "recommend": config},
    )
    console.print("your own measured profile: `unstall recommend --profile profile.json ...`")


def _ps(out: Path, quiet: bool) -> None:
    from unstall import ps
    from unstall.cli.common import progress_bar, save_json
    from unstall.cli.ps import print_bench
    from unstall.report.ps_plot import plot_bench

    # psld against the frameworks' default assignments and the static oracle.
    names, scenarios = ["mxnet", "byteps", "tf-greedy", "psld"], ["bandwidth"]
    request = ps.PSRequest(iterations=8)
    cases, strategies = ps.resolve_bench(request, names, scenarios)
    total = len(ps.with_oracle(strategies)) * len(cases)
    with progress_bar("ps bench", total, quiet) as advance:
        result = ps.compare_strategies(cases, strategies, iterations=8, progress=advance)
    print_bench(result)
    console.print(f"wrote {plot_bench(result, out / 'ps_bench.png')}", highlight=False)
    config = {"base": request, "strategies": names, "scenarios": scenarios}
    save_json(out / "ps_bench.json", result, config)
    console.print(
        "real training with the reference check: `unstall ps train --data digits "
        "--scenario bandwidth --strategy oracle -n 30 --check-reference`; PSLD with elastic "
        "spare servers and a moving straggler: `unstall ps train --scenario dynamic "
        "--strategy psld --spares 2 -n 30 --check-reference`"
    )


def _sparse_cnn(out: Path, quiet: bool) -> None:
    from unstall.cli.common import progress_bar, save_json
    from unstall.cli.resolvers import sparse as resolve
    from unstall.cli.sparse_tables import plot_path, set_threads, show_analysis
    from unstall.sparse import AcceleratorConfig, AnalyzerConfig, CNNSparsityConfig, analyze_cnn

    training = AnalyzerConfig(
        model="resnet18", image_size=32, batch_size=4, warmup_steps=2, steps=1
    )
    # Per-row skipping (each array row skips its own zeros), with lockstep and a weight-stationary
    # array beside it: the granularity of skipping is what decides the speed-up.
    main = AcceleratorConfig(array=resolve.array_config("16x16"), skipping="per-row")
    config = CNNSparsityConfig(
        analyzer=training,
        accelerator=main,
        compare=resolve.accelerators("os/lockstep,ws/per-row", main),
    )
    model = resolve.cnn_model("resnet18", image_size=32, num_classes=training.num_classes)
    set_threads(1)
    json_path = out / "sparsity_resnet18.json"
    with progress_bar("resnet18 steps", training.warmup_steps + training.steps, quiet) as advance:
        result = analyze_cnn(model, config=config, progress=advance)
    show_analysis(result, plot_path(None, json_path))
    save_json(json_path, result, config)
    console.print("trained for a while first: `unstall sparse analyze --warmup-steps 150 ...`")


def _profile(out: Path, quiet: bool) -> None:

    from unstall.cli.profile import parse_network, print_header, saved_config, show_report
    from unstall.profile import ProfileConfig, measure_stalls, resolve_data, resolve_model
    from unstall.profile.names import resolve_device

    model = resolve_model("mlp")
    data = resolve_data("synthetic", model, batch=8)
    config = ProfileConfig(
        workers=2,
        network=parse_network("1,0.5"),
        iterations=4,
        repeats=3,
        device=resolve_device("auto", workers_per_node=2),
    )
    print_header(model.name, config, data)
    report = measure_stalls(model.build, data, config, name=model.name, model_options=model.options)
    show_report(
        report,
        plot=out / "stalls_mlp.png",
        json_path=out / "stalls_mlp.json",
        config=saved_config(model, config, batch=8, image_size=32, data=None),
    )
    console.print(
        "with data stalls: `unstall profile data DIR` then `unstall profile run --data DIR ...`"
    )


# (title, runner): the parts that are built, in the order a new user meets them.
SECTIONS: list[tuple[str, Callable[[Path, bool], None]]] = [
    ("model zoo: static facts computed from the torch modules", _zoo),
    ("perf model: iteration time on a placement, with congestion", _perf),
    ("traces: the embedded default trace", _trace),
    ("cluster simulator: every scheduler, Dally included, on the embedded trace", _sim),
    ("live scheduling: the same policy places real jobs on a local Ray cluster", _live),
    ("scheduler service: jobs submitted to a running unstall serve, queued, cancelled", _service),
    ("stall profiler: compute, interconnect and network stalls of a DDP run", _profile),
    ("cost advisor: cheapest AWS configuration for ResNet-50 on ImageNet in 24 h", _recommend),
    ("parameter server on Ray: assignments under a bandwidth straggler", _ps),
    ("sparse training: structured dropout that really skips the dropped units", _sparse_lstm),
    ("sparse training: CNN activation/gradient sparsity on a systolic array", _sparse_cnn),
]


def demo(
    out: Annotated[
        Path, typer.Option("--out", help="Folder for the plots and JSON the demo writes.")
    ] = Path("out/demo"),
    quiet: QuietOpt = False,
) -> None:
    """Show each built part at work on the embedded default data."""
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    for title, section in SECTIONS:
        console.rule(title)
        t0 = time.perf_counter()
        section(out, quiet)
        console.print(f"[dim]({time.perf_counter() - t0:.1f} s)[/]")
    console.rule(f"done in {time.perf_counter() - started:.0f} s; plots and JSON in {out}/")
