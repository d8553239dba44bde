"""The recommendation: every configuration ranked, the cheapest one within the budget, the front.

Ranking: the configurations within the time budget by predicted cost (to the cent, and to three
significant figures for costs under ten dollars; equal costs go to the faster one), then those
over the budget by predicted time (the nearest miss first). The recommended configuration is the
first of the list when it is within the budget; when none is, there is no recommendation and
:attr:`Recommendation.fastest` says how close the budget came.

The time/cost Pareto front: the configurations that no other beats on both time and cost
(another is at most as slow and at most as costly, and better on one of them).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

from unstall.config import check
from unstall.cost.catalog import Catalog, Instance
from unstall.cost.predict import JobModel, Prediction, TrainingConfig, predict_all
from unstall.errors import ConfigError
from unstall.results import JsonResult

MAX_INSTANCES_LIMIT = 64


@dataclass(frozen=True, kw_only=True)
class RecommendConfig:
    """The question: train ``training`` within ``budget_hours`` on 1..``max_instances``
    instances of one type, among the catalog's types of ``families`` (all when empty)."""

    training: TrainingConfig
    budget_hours: float
    max_instances: int = 16
    families: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        check(
            isinstance(self.training, TrainingConfig),
            self,
            "training",
            f"must be a TrainingConfig, got {type(self.training).__name__}",
        )
        check(
            math.isfinite(self.budget_hours) and self.budget_hours > 0,
            self,
            "budget_hours",
            f"must be a number of hours > 0, got {self.budget_hours!r}",
        )
        check(
            isinstance(self.max_instances, int) and 1 <= self.max_instances <= MAX_INSTANCES_LIMIT,
            self,
            "max_instances",
            f"must be an integer in 1..{MAX_INSTANCES_LIMIT}, got {self.max_instances!r}",
        )
        # A str is a sequence of its letters, each a "family" the check below would pass.
        check(
            not isinstance(self.families, str),
            self,
            "families",
            f"must be a tuple of family names, got the str {self.families!r}"
            f" (write ({self.families!r},))",
        )
        check(
            all(isinstance(f, str) and f for f in self.families),
            self,
            "families",
            f"must be non-empty names, got {self.families!r}",
        )

    def selects(self, instance: Instance) -> bool:
        """Whether ``instance`` is among the families asked for (its family, or its name's part
        before the first dot, e.g. "p3" for "p3.8xlarge")."""
        return not self.families or family_of(instance) in self.families


def family_of(instance: Instance) -> str:
    """The family :meth:`RecommendConfig.selects` matches: the catalog's, or the name's part
    before the first dot."""
    return instance.family or instance.instance.split(".", 1)[0]


@dataclass(frozen=True, kw_only=True)
class Candidate(Prediction):
    """A :class:`Prediction` judged against the budget and the other configurations."""

    within_budget: bool
    on_pareto_front: bool


@dataclass(frozen=True, kw_only=True)
class Recommendation(JsonResult):
    """Every configuration ranked (see the module docstring) and what to take."""

    job: str
    job_origin: str
    samples: int
    epochs: float
    global_batch: int | None  # fixed on every configuration; None: the job's batch per GPU
    budget_hours: float
    network_efficiency: float
    catalog: str
    catalog_dates: tuple[str, ...]
    feasible: bool
    recommended: Candidate | None
    fastest: Candidate
    cheapest: Candidate
    candidates: tuple[Candidate, ...]
    pareto_front: tuple[Candidate, ...]

    @property
    def fastest_over_budget(self) -> float:
        """The fastest configuration's time as a multiple of the budget (< 1: it fits)."""
        return self.fastest.predicted_hours / self.budget_hours


def dominates(a: Prediction, b: Prediction) -> bool:
    """``a`` is at most as slow and at most as costly as ``b``, and better on one of them."""
    no_worse = (
        a.predicted_hours <= b.predicted_hours and a.predicted_cost_usd <= b.predicted_cost_usd
    )
    better = a.predicted_hours < b.predicted_hours or a.predicted_cost_usd < b.predicted_cost_usd
    return no_worse and better


def cost_to_compare(cost_usd: float) -> float:
    """``cost_usd`` as the ranking compares it: to the cent, and to three significant figures
    below ten dollars (the finer of the two), so that $0.015 and $0.0088 differ though both are
    a cent."""
    if cost_usd <= 0 or not math.isfinite(cost_usd):
        return cost_usd
    significant = 3 - 1 - math.floor(math.log10(cost_usd))
    return round(cost_usd, max(2, significant))


def _cost_key(p: Prediction) -> tuple[float, float, float, str, int]:
    # Costs equal to the cent (and to three significant figures, for small ones) go to the
    # faster configuration; a cent is not worth waiting for, 40% of a small bill is. The exact
    # cost, then the name, break the remaining ties, so that the recommendation is always on the
    # Pareto front.
    return (
        cost_to_compare(p.predicted_cost_usd),
        p.predicted_hours,
        p.predicted_cost_usd,
        p.instance,
        p.count,
    )


def _time_key(p: Prediction) -> tuple[float, float, str, int]:
    return (p.predicted_hours, p.predicted_cost_usd, p.instance, p.count)


def pareto_front(points: Sequence[Prediction]) -> list[Prediction]:
    """The non-dominated configurations, fastest first (one of each set of equal points).

    Sorted by time then cost, a point is on the front exactly when it is cheaper than every
    point before it.
    """
    front: list[Prediction] = []
    cheapest_so_far = math.inf
    for p in sorted(points, key=_time_key):
        if p.predicted_cost_usd < cheapest_so_far:
            front.append(p)
            cheapest_so_far = p.predicted_cost_usd
    return front


def rank(predictions: Sequence[Prediction], budget_hours: float) -> list[Candidate]:
    """Within the budget by cost, then over it by time; each marked for budget and front."""
    front = {(p.instance, p.count) for p in pareto_front(predictions)}
    within = sorted((p for p in predictions if p.predicted_hours <= budget_hours), key=_cost_key)
    over = sorted((p for p in predictions if p.predicted_hours > budget_hours), key=_time_key)
    values = [f.name for f in fields(Prediction)]
    return [
        Candidate(
            **{name: getattr(p, name) for name in values},
            within_budget=p.predicted_hours <= budget_hours,
            on_pareto_front=(p.instance, p.count) in front,
        )
        for p in [*within, *over]
    ]


def rank_configurations(
    job: JobModel,
    catalog: Catalog,
    config: RecommendConfig,
    *,
    on_instance: Callable[[Instance], None] | None = None,
) -> Recommendation:
    """Predict every configuration of the catalog's (selected) types and rank them;
    ``on_instance`` follows each instance type predicted (for progress)."""
    instances = [i for i in catalog if config.selects(i)]
    if not instances:
        raise ConfigError(
            "RecommendConfig",
            "families",
            f"no instance type of {list(config.families)} in {catalog.source}; its families: "
            f"{list(dict.fromkeys(family_of(i) for i in catalog))}",
        )
    predictions = predict_all(
        job, instances, config.training, max_instances=config.max_instances, on_instance=on_instance
    )
    if not predictions:
        raise ConfigError(
            "TrainingConfig",
            "global_batch",
            f"{config.training.global_batch} is smaller than the GPUs of every configuration",
        )
    ranked = rank(predictions, config.budget_hours)
    return Recommendation(
        job=job.name,
        job_origin=job.origin,
        samples=config.training.samples,
        epochs=config.training.epochs,
        global_batch=config.training.global_batch,
        budget_hours=config.budget_hours,
        network_efficiency=config.training.network_efficiency,
        catalog=catalog.source,
        catalog_dates=tuple(sorted({i.date for i in instances})),
        feasible=ranked[0].within_budget,
        recommended=ranked[0] if ranked[0].within_budget else None,
        fastest=min(ranked, key=_time_key),
        cheapest=min(ranked, key=_cost_key),
        candidates=tuple(ranked),
        pareto_front=tuple(c for c in sorted(ranked, key=_time_key) if c.on_pareto_front),
    )
