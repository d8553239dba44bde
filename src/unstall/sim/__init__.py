"""Event-driven simulator of a GPU cluster running a job trace under a scheduling policy.

What this part offers:

- ``simulate(trace, cluster, policy, *, congestion=, seed=, restore_s=, tick_s=, model_mix=,
  max_jobs=, job_profiles=, duration_gpu=, on_finish=, startup_model=)`` -> :class:`SimRun`: a
  :class:`unstall.traces.Trace` on a :class:`unstall.net.TopologyConfig` (regular, or node
  groups of several GPU types) under a :class:`unstall.sched.Policy` object; each may be named
  as on the command line instead (a trace file, ``"small"`` or a topology file, ``"fifo"`` or
  ``"FILE.py:Class"``, ``congestion="medium"`` or a ``.csv`` schedule). Job speeds come
  from the perf model (:mod:`unstall.workload`): placement, the GPU types it spans (the slowest
  sets the compute time) and network contention (max-min fair shares of NICs and uplinks, less
  background congestion) change progress exactly. The one engine entry: ``unstall sim run``,
  ``sim compare`` and every cell of ``sim sweep`` call it.
- :class:`SimRun`: the summary (:class:`SimResult`, with ``to_json()``), one row per job of the
  trace (with its ``outcome``, rejected jobs included, and ``gpu_type``), the timeline (busy
  GPUs, queue, congestion) and the policy's telemetry, as DataFrames.
- Sweeps: :class:`SweepGrid` (policies x congestion levels x seeds x clusters x traces, as
  labels) and its cells (:class:`SweepCell`), :class:`CellOutcome`, ``sweep_rows`` and
  ``summarise_sweep`` (mean and spread over seeds), :class:`SweepResult`; the cells run as Ray
  tasks in :mod:`unstall.sim.sweep_ray` (``run_sweep``: Ray started or joined, traces put once;
  the tasks built from the grid's labels by :mod:`unstall.sim.sweep_tasks`).
- Start-ups and restores: a :class:`StartupModel` (what a job's first start and each restart
  cost, by the GPUs, nodes and racks its placement spans and its model, in wall seconds scaled
  by a live run's speedup), ``default_startup_model()`` (the package's, fitted on live runs),
  ``fit_startup_model`` and ``read_setups`` (``unstall live calibrate``: a model fitted on live
  runs' JSON); ``simulate(startup_model=...)`` charges it (by default no model: 0 and 60 s).
- :class:`SimRequest`: one run by names and files, as ``--json`` saves it beside a result so
  that it can be repeated; ``simulate_request(request, trace)`` resolves and runs it
  (``read_job_profiles`` reads its JobProfile files).
- Background congestion (:class:`Congestion`): a seeded :class:`CongestionLevel` (the levels
  ``none``, ``low``, ``medium``, ``high`` by ``congestion_level(name)``), or any
  :class:`CongestionSchedule` (``read_congestion_schedule(path)`` reads ``time_s,fraction``);
  ``resolve_congestion`` takes either, or a level's name or a schedule file.
- :class:`SimInvariantError`: a policy (or the engine) broke an invariant, e.g. gave a GPU twice;
  :class:`PolicyError`, one of them, names the policy, the job and the rule its decision broke.
- :class:`PolicyCrashError`: a policy's ``decide`` or ``reset`` raised; one line naming the
  policy, the exception and the file, line and function that raised it.
- :class:`SimInterrupted`: a Ctrl-C stopped :func:`simulate`; a KeyboardInterrupt that says how
  far the run got (simulated time, jobs finished of those simulated).
- For the other drivers of the scheduling core (:mod:`unstall.loop`; the live backend, the
  service), what a run on a real cluster shares with a simulated one: ``layout_of`` (the cluster
  as policies see it), ``speed_model`` and :class:`PerfSpeedModel` (job speeds by placement),
  ``run_jobs`` / :class:`RunJobs` (a trace's jobs, with the ones too large for the cluster set
  apart; ``check_trace_models``: every model a trace names is known), :class:`NetworkState`
  (max-min fair link shares), and the results: ``job_table``, ``timeline_table``,
  ``summarise``, ``gpu_type_of``, ``run_end``.
- :class:`LookaheadDally`: Dally whose settings a look-ahead with this simulator chooses online;
  importing ``unstall.sim`` gives the policy registry its builder, so that ``make_policy("dally")``
  builds one (``sched`` never imports ``sim``); ``tuner_course(telemetry)`` says what it chose.

Example: the first 50 jobs of the embedded trace, all training a model measured by
``unstall profile`` (a :class:`unstall.workload.JobProfile`; jobs naming a zoo model need no
profile), under fifo on the small cluster.

>>> from unstall.net import topology_preset
>>> from unstall.sched import make_policy
>>> from unstall.sim import congestion_level, simulate
>>> from unstall.traces import assign_models, default_trace
>>> from unstall.workload import JobProfile
>>> my_net = JobProfile(
...     model="my-net", device="v100", compute_s=0.05, local_batch=32,
...     gradient_bytes=100_000_000, gradient_tensors=40, layers=20,
... )
>>> trace = assign_models(default_trace(), {"my-net": 1.0}, overwrite=True)
>>> run = simulate(
...     trace, topology_preset("small"), make_policy("fifo"),
...     congestion=congestion_level("medium"), max_jobs=50, job_profiles=[my_net],
... )
>>> run.result.policy, run.result.cluster, run.result.congestion, run.result.jobs_finished
('fifo', 'small', 'medium', 50)
>>> len(run.jobs), bool(run.result.avg_jct_s > 0)
(50, True)
"""

from unstall.loop.checks import PolicyError
from unstall.loop.failures import PolicyCrashError
from unstall.loop.jobs import SimInvariantError
from unstall.sim.congestion import (
    CONGESTION_LEVELS,
    MAX_FRACTION,
    NO_CONGESTION,
    Congestion,
    CongestionLevel,
    CongestionSchedule,
    congestion_level,
    read_congestion_schedule,
    resolve_congestion,
)
from unstall.sim.engine import SimInterrupted
from unstall.sim.lookahead import LookaheadDally, tuner_course
from unstall.sim.metrics import SimResult, job_table, summarise, timeline_table
from unstall.sim.network import NetworkState
from unstall.sim.perf_speed import PerfSpeedModel
from unstall.sim.request import SimRequest, read_job_profiles, simulate_request
from unstall.sim.run import (
    RunJobs,
    SimRun,
    check_trace_models,
    gpu_type_of,
    layout_of,
    run_end,
    run_jobs,
    simulate,
    speed_model,
)
from unstall.sim.startup import (
    SetupTerms,
    StartupModel,
    default_startup_model,
    resolve_startup_model,
)
from unstall.sim.startup_fit import fit_startup_model, read_setups
from unstall.sim.sweep import (
    CellOutcome,
    SweepCell,
    SweepGrid,
    SweepResult,
    summarise_sweep,
    sweep_rows,
)

__all__ = [
    "CONGESTION_LEVELS",
    "MAX_FRACTION",
    "NO_CONGESTION",
    "CellOutcome",
    "Congestion",
    "CongestionLevel",
    "CongestionSchedule",
    "LookaheadDally",
    "NetworkState",
    "PerfSpeedModel",
    "PolicyCrashError",
    "PolicyError",
    "RunJobs",
    "SetupTerms",
    "SimInterrupted",
    "SimInvariantError",
    "SimRequest",
    "SimResult",
    "SimRun",
    "StartupModel",
    "SweepCell",
    "SweepGrid",
    "SweepResult",
    "check_trace_models",
    "congestion_level",
    "default_startup_model",
    "fit_startup_model",
    "gpu_type_of",
    "job_table",
    "layout_of",
    "read_congestion_schedule",
    "read_job_profiles",
    "read_setups",
    "resolve_congestion",
    "resolve_startup_model",
    "run_end",
    "run_jobs",
    "simulate",
    "simulate_request",
    "speed_model",
    "summarise",
    "summarise_sweep",
    "sweep_rows",
    "timeline_table",
    "tuner_course",
]
