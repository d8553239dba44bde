"""Cost advisor: which cloud GPU configuration trains a job within a time budget at the lowest cost.

``catalog`` reads instance types (the AWS catalog ships in ``cost/data``); ``predict`` gives the
training time of a job on ``count`` instances of a type from the perf model (or from measured
iteration times); ``recommend`` ranks every configuration and picks the cheapest one that meets
the budget, with the time/cost Pareto front.
"""
