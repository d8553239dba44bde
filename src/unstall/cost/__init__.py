"""Cost advisor: which cloud GPU configuration trains a job within a time budget at the lowest cost.

What the part offers:

- :func:`recommend` ``(job, config, *, catalog=, precision=)``: every configuration (instance
  type x 1..N) ranked by predicted time and cost, the cheapest one within the budget and the
  time/cost Pareto front, as a :class:`Recommendation`. The question is a
  :class:`RecommendConfig` (:func:`recommend_config`), built once and handed whole, or its
  keywords (``samples=, epochs=, budget_hours=, ...``); the job and the catalog may be names
  (a zoo model, a JobProfile JSON file; a catalog CSV file): :func:`resolve_job`,
  :func:`resolve_catalog`.
- The job: a measured :class:`~unstall.workload.profiles.JobProfile` (from
  :func:`unstall.profile.measure_stalls`), or a :class:`JobModel` (:func:`job_from_profile`,
  :func:`job_from_model`: a zoo model estimated from its FLOPs on each GPU type).
- The catalog: :func:`default_catalog` (AWS GPU instances, shipped in the package),
  :func:`load_catalog` (your CSV with the same columns), :func:`parse_catalog` (CSV text); a
  :class:`Catalog` of :class:`Instance` types.
- One configuration's time and cost: :func:`predict_all` gives each as a :class:`Prediction`
  (iteration time, exposed communication, slowest link, hours, dollars).

For example, ResNet-50 on ImageNet for 90 epochs within a day:

>>> from unstall.cost import default_catalog, job_from_model, recommend
>>> catalog = default_catalog()
>>> job = job_from_model("resnet50", catalog.devices)
>>> rec = recommend(job, catalog=catalog, samples=1_281_167, epochs=90, budget_hours=24)
>>> best = rec.recommended
>>> best.label, best.gpus, round(best.predicted_hours, 1), round(best.predicted_cost_usd)
('1 x p4d.24xlarge', 8, 5.8, 127)
>>> rec.fastest.label
'16 x p5.48xlarge'
"""

from unstall.cost.advisor import recommend, recommend_config, resolve_catalog, resolve_job
from unstall.cost.catalog import Catalog, Instance, default_catalog, load_catalog, parse_catalog
from unstall.cost.predict import (
    JobModel,
    Prediction,
    TrainingConfig,
    job_from_model,
    job_from_profile,
    predict_all,
)
from unstall.cost.ranking import Candidate, Recommendation, RecommendConfig, pareto_front

__all__ = [
    "Candidate",
    "Catalog",
    "Instance",
    "JobModel",
    "Prediction",
    "RecommendConfig",
    "Recommendation",
    "TrainingConfig",
    "default_catalog",
    "job_from_model",
    "job_from_profile",
    "load_catalog",
    "pareto_front",
    "parse_catalog",
    "predict_all",
    "recommend",
    "recommend_config",
    "resolve_catalog",
    "resolve_job",
]
