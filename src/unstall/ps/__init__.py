"""Parameter server on Ray: synchronous SGD of your own torch model, placement strategies (PSLD's
dynamic load distribution among them), emulated straggling servers.

What it offers:

- :func:`fit` ``(model, data, *, loss, optimizer, workers, servers, strategy, scenario,
  iterations, seed, check_reference, address, ...) -> PSRunResult``: ``model()`` builds an
  ``nn.Module``, ``data(rank, world_size)`` gives each worker an iterable of
  ``(inputs, targets)``, ``loss(outputs, targets)`` a scalar tensor. The result carries the
  figures of the run and the trained ``state_dict``.
- :func:`compare_strategies` ``(cases, strategies, ...) -> PSBenchResult``: every strategy in
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
- Arguments are objects, not names: one of the wrong kind (``strategy="psld"`` for
  ``STRATEGIES["psld"]``, ``SCENARIOS["bandwidth"]`` uncalled, ``workers="2"``, a built
  ``nn.Module`` for the function that builds it) to :func:`fit`, :func:`predict_iter_s`,
  :func:`compare_strategies` or :class:`BenchCase` raises a one-line
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
...     strategy=ps.STRATEGIES["psld"],
...     check_reference=True,
... )
>>> result.params_match_reference, sorted(result.state_dict)
(True, ['bias', 'weight'])
"""

import os

# Keep a local Ray instance on the loopback interface: with Ray's multi-node mode off it
# advertises 127.0.0.1 instead of the machine's first network address. Ray reads this flag when
# it is imported, which the modules of this package do; runs against a cluster on other machines
# switch the mode back on in ``runtime.ensure_ray``.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")

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
from unstall.ps.data import LOSSES, ArrayData, SyntheticData, load_digits
from unstall.ps.errors import PSActorDiedError, PSTimeoutError
from unstall.ps.links import ServerSpec
from unstall.ps.named import Named
from unstall.ps.optim import OPTIMIZERS, AdamConfig, ServerOptimizer, SGDConfig
from unstall.ps.psld.config import ControllerConfig
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
    "Named",
    "PSActorDiedError",
    "PSBenchResult",
    "PSCheckpoint",
    "PSLDStrategy",
    "PSRunResult",
    "PSTimeoutError",
    "Phase",
    "SGDConfig",
    "Scenario",
    "ServerOptimizer",
    "ServerOverride",
    "ServerSpec",
    "StaticStrategy",
    "Strategy",
    "SyntheticData",
    "compare_strategies",
    "ensure_ray",
    "even_split_s",
    "fit",
    "link_for_transfer_ratio",
    "load_digits",
    "load_scenario",
    "predict_iter_s",
    "scaled_links",
    "scenario_table",
    "with_oracle",
]
