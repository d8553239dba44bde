"""Parameter server on Ray: synchronous SGD of your own torch model, placement strategies (PSLD's
dynamic load distribution among them), emulated straggling servers.

What it offers:

- :func:`fit` ``(model, data, config, *, loss, resume, ...) -> PSRunResult``: ``model()``
  builds an ``nn.Module``, ``data(rank, world_size)`` gives each worker an iterable of
  ``(inputs, targets)``, ``loss(outputs, targets)`` a scalar tensor (each may be a name
  instead: ``"mlp"``, ``"synthetic"``, ``"mse"``). ``config`` is a :class:`FitConfig` (workers,
  iterations, seed, servers, the strategy, scenario and optimizer, objects or names such as
  ``"psld"``, ``"bandwidth"``, ``"adam"``; sections :class:`RecoveryConfig` and
  :class:`RuntimeConfig`, whose ``device="cuda"`` puts each worker's forward and backward on
  a GPU of its own), built once and handed whole; its fields may come as keywords
  instead (``workers=2, strategy="psld"``). The result carries the figures of the run and the
  trained ``state_dict``.
- A run described by names (what the command line and the benchmarks describe):
  :class:`PSRequest`, :func:`resolve_run` (its objects and its :class:`FitConfig`),
  :func:`resolve_case` and :func:`resolve_bench` (a grid's cases), :func:`bench_config` (the
  config a grid's runs share).
- :func:`compare_strategies` ``(cases, strategies, config) -> PSBenchResult``: every strategy in
  every :class:`BenchCase` (a scenario and what to train in it), with the ratio to the oracle
  (:func:`with_oracle`: the strategies a grid runs).
- :func:`predict_iter_s`: the cost model's time of a strategy's placement, without running.
- Strategies: :data:`STRATEGIES` (``mxnet``, ``byteps``, ``tf-greedy``, ``round-robin``,
  ``oracle``, ``psld``), :class:`Strategy` (the protocol a user's own follows),
  :class:`StaticStrategy`, :class:`PSLDStrategy` and its :class:`ControllerConfig`.
- Scenarios: :class:`Scenario` (servers, a base :class:`ServerSpec` of
  :class:`~unstall.net.link.Link` and compute, :class:`Phase` s of :class:`ServerOverride` s),
  the presets :data:`SCENARIOS`, :func:`load_scenario` (TOML/JSON), :func:`scaled_links`,
  :func:`scenario_table`.
- Data and losses: :class:`ArrayData` (numpy arrays or torch tensors, which it copies to
  numpy arrays on the CPU), :class:`SyntheticData`, :func:`load_digits`, :data:`LOSSES`;
  :class:`Named` gives a callable the label results show.
- Optimizers the servers step with (their state moves with the parameters): :class:`SGDConfig`
  (momentum, weight decay, Nesterov), :class:`AdamConfig`, by name in :data:`OPTIMIZERS`; the
  protocol :class:`ServerOptimizer`.
- :class:`PSCheckpoint`: a run's progress (``fit(checkpoint_every=, on_checkpoint=)`` hands
  them out, ``fit(resume=)`` goes on from one with an unstopped run's result), saved and
  loaded with ``.save(path)`` / ``PSCheckpoint.load(path)``.
- Failures: ``fit(max_recoveries=N)`` survives N dead workers or servers (a result's
  ``recoveries``), going on from a snapshot taken every ``snapshot_every`` iterations (default
  1); without it :class:`PSActorDiedError` names the dead actor.
- An argument of the wrong kind (an unknown name, ``SCENARIOS["bandwidth"]`` uncalled,
  ``workers="2"``, a built ``nn.Module`` for the function that builds it) to :func:`fit`,
  :func:`predict_iter_s`, :func:`compare_strategies` or :class:`BenchCase` raises a one-line
  :class:`~unstall.errors.ConfigError` naming the parameter, before anything runs.
- Ray: :func:`ensure_ray`, :class:`ActorPool` (a result's ``nodes`` says where each actor ran);
  errors :class:`PSActorDiedError`, :class:`PSTimeoutError` (and
  :class:`~unstall.usercode.UserCodeError` for errors in the user's functions).
- The evaluation's links rule: :func:`even_split_s`, :func:`link_for_transfer_ratio`.

Example (Ray started on loopback, or the running one used):

>>> import functools, torch
>>> from unstall import ps
>>> features = torch.randn(64, 4).numpy()
>>> labels = (features.sum(axis=1) > 0).astype("int64")
>>> result = ps.fit(
...     functools.partial(torch.nn.Linear, 4, 2),
...     ps.ArrayData(features, labels, batch_size=8),
...     workers=2,
...     iterations=3,
...     strategy="psld",
...     check_reference=True,
... )
>>> result.params_match_reference, sorted(result.state_dict)
(True, ['bias', 'weight'])
"""

# Ray's environment flags (a local Ray on the loopback interface, zero-copy torch tensors) are
# set where Ray starts: unstall.ray_connect.connect_ray, which ensure_ray calls.
from unstall.ps.bench import (
    BenchCase,
    BenchRow,
    PSBenchResult,
    compare_strategies,
    even_split_s,
    link_for_transfer_ratio,
    with_oracle,
)
from unstall.ps.checkpoint import PSCheckpoint
from unstall.ps.config import FitConfig, RecoveryConfig, RuntimeConfig
from unstall.ps.data import ArrayData, load_digits
from unstall.ps.errors import PSActorDiedError, PSTimeoutError
from unstall.ps.links import ServerSpec
from unstall.ps.optim import OPTIMIZERS, AdamConfig, ServerOptimizer, SGDConfig
from unstall.ps.psld.config import ControllerConfig
from unstall.ps.request import (
    PSRequest,
    ResolvedRun,
    bench_config,
    resolve_bench,
    resolve_case,
    resolve_run,
)
from unstall.ps.runtime import ActorPool, ensure_ray
from unstall.ps.scenarios import (
    SCENARIOS,
    Phase,
    Scenario,
    ServerOverride,
    load_scenario,
    scaled_links,
    scenario_table,
)
from unstall.ps.strategies import (
    STRATEGIES,
    PSLDStrategy,
    StaticStrategy,
    Strategy,
)
from unstall.ps.train import PSRunResult, fit, predict_iter_s
from unstall.workload.losses import LOSSES
from unstall.workload.named import Named
from unstall.workload.zoo_jobs import SyntheticData

__all__ = [
    "LOSSES",
    "OPTIMIZERS",
    "SCENARIOS",
    "STRATEGIES",
    "ActorPool",
    "AdamConfig",
    "ArrayData",
    "BenchCase",
    "BenchRow",
    "ControllerConfig",
    "FitConfig",
    "Named",
    "PSActorDiedError",
    "PSBenchResult",
    "PSCheckpoint",
    "PSLDStrategy",
    "PSRequest",
    "PSRunResult",
    "PSTimeoutError",
    "Phase",
    "RecoveryConfig",
    "ResolvedRun",
    "RuntimeConfig",
    "SGDConfig",
    "Scenario",
    "ServerOptimizer",
    "ServerOverride",
    "ServerSpec",
    "StaticStrategy",
    "Strategy",
    "SyntheticData",
    "bench_config",
    "compare_strategies",
    "ensure_ray",
    "even_split_s",
    "fit",
    "link_for_transfer_ratio",
    "load_digits",
    "load_scenario",
    "predict_iter_s",
    "resolve_bench",
    "resolve_case",
    "resolve_run",
    "scaled_links",
    "scenario_table",
    "with_oracle",
]
