"""One worker's training loop, timed: a step of each phase (data, forward, loss and backward,
optimizer), a run of steps, and the check of the first batch.

The timed steps call the user's model and loss bare (a wrapper would be timed with them); what
they raise is named afterwards (:func:`unstall.profile.failures.step_failure`): the phase, the
user's file and line, the batch.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, NoReturn

import torch
from torch import nn

from unstall.profile.comm_hook import HookState
from unstall.profile.config import ProfileConfig
from unstall.profile.failures import describe_loss, describe_value, step_failure
from unstall.profile.images import BatchFeed
from unstall.profile.job import LossFunction, ModelFunction
from unstall.usercode import UserCodeError
from unstall.workload.losses import loss_problem

PHASES = ("data", "forward", "backward", "allreduce", "optimizer")
# One iteration's (phase, start, end) spans.
Spans = list[tuple[str, float, float]]


@dataclass
class Loop:
    """What one timed run steps: a model, its optimizer, a batch feed, the loss, the hook state."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    feed: BatchFeed
    loss: LossFunction
    hook: HookState | None
    device: torch.device
    model_fn: ModelFunction | None = None  # what built the model, named when it fails


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed_step(loop: Loop, index: int, compute_delay_s: float) -> list[tuple[str, float, float]]:
    """One timed iteration; returns (phase, start, end) spans, the buckets' spans included."""
    phase, outputs = "data", None
    batch: tuple[Any, Any] = (None, None)
    try:
        marks = [time.perf_counter()]
        batch = loop.feed(index)
        inputs, targets = batch[0].to(loop.device), batch[1].to(loop.device)
        _sync(loop.device)
        marks.append(time.perf_counter())
        if compute_delay_s > 0:
            time.sleep(compute_delay_s)
        phase = "forward"
        outputs = loop.model(inputs)
        phase = "loss"
        loss = loop.loss(outputs, targets)
        _sync(loop.device)
        marks.append(time.perf_counter())
        if loop.hook is not None:
            loop.hook.spans.clear()
        phase = "backward"
        loss.backward()
        _sync(loop.device)
        marks.append(time.perf_counter())
        phase = "optimizer"
        loop.optimizer.step()
        loop.optimizer.zero_grad(set_to_none=True)
        _sync(loop.device)
        marks.append(time.perf_counter())
    except Exception as exc:
        _raise_step_failure(loop, exc, phase, batch, outputs)
    spans = [(p, marks[i], marks[i + 1]) for i, p in enumerate(("data", "forward", "backward"))]
    spans.append(("optimizer", marks[3], marks[4]))
    for start, end in loop.hook.spans if loop.hook is not None else []:
        spans.append(("allreduce", start, end))
    return spans


def untimed_step(loop: Loop, index: int, compute_delay_s: float) -> None:
    """The same iteration without the phase timers, for measuring the timers' overhead."""
    phase, outputs = "data", None
    batch: tuple[Any, Any] = (None, None)
    try:
        batch = loop.feed(index)
        if compute_delay_s > 0:
            time.sleep(compute_delay_s)
        phase = "forward"
        outputs = loop.model(batch[0].to(loop.device))
        phase = "loss"
        loss = loop.loss(outputs, batch[1].to(loop.device))
        phase = "backward"
        loss.backward()
        phase = "optimizer"
        loop.optimizer.step()
        loop.optimizer.zero_grad(set_to_none=True)
        _sync(loop.device)
    except Exception as exc:
        _raise_step_failure(loop, exc, phase, batch, outputs)


def _raise_step_failure(
    loop: Loop, exc: Exception, phase: str, batch: tuple[Any, Any], outputs: Any
) -> NoReturn:
    """Raise what a step's failure reports (:func:`unstall.profile.failures.step_failure`): the
    timed steps call the user's model and loss bare, and name them only when they fail."""
    failure = step_failure(
        exc,
        phase=phase,
        model_fn=loop.model_fn,
        loss=loop.loss,
        inputs=batch[0],
        targets=batch[1],
        outputs=outputs,
    )
    if failure is exc:
        raise exc
    raise failure from exc


def phase_totals(spans: list[tuple[str, float, float]]) -> dict[str, float]:
    totals = dict.fromkeys(PHASES, 0.0)
    comm = [(s, e) for p, s, e in spans if p == "allreduce"]
    for phase, start, end in spans:
        if phase != "allreduce":
            totals[phase] += end - start
    if comm:  # buckets overlap backward: report the span from the first start to the last end
        totals["allreduce"] = max(e for _, e in comm) - min(s for s, _ in comm)
    return totals


def time_run(
    loop: Loop, config: ProfileConfig, timed: bool = True
) -> tuple[float, dict[str, float], list[Spans]]:
    """Warm-up, then ``iterations`` timed iterations: seconds per iteration, phase means, and
    every timed iteration's spans."""
    delay = config.delays.compute_s
    for index in range(config.warmup):
        untimed_step(loop, index, delay)
    if loop.hook is not None:
        loop.hook.delay_total_s = 0.0  # the emulated link's delay of the timed iterations only
    totals = dict.fromkeys(PHASES, 0.0)
    every: list[Spans] = []
    started = time.perf_counter()
    for index in range(config.warmup, config.warmup + config.iterations):
        if timed:
            every.append(timed_step(loop, index, delay))
            for phase, seconds in phase_totals(every[-1]).items():
                totals[phase] += seconds
        else:
            untimed_step(loop, index, delay)
    per_iteration = (time.perf_counter() - started) / config.iterations
    return per_iteration, {p: t / config.iterations for p, t in totals.items()}, every


def check_step(loop: Loop) -> int:
    """One forward and loss on the first batch, checked: the loss must be a finite scalar
    tensor that backward can start from. Returns the batch's size, the local batch."""
    inputs, targets = loop.feed(0)
    phase, outputs = "forward", None
    try:
        outputs = loop.model(inputs.to(loop.device))
        phase = "loss"
        loss = loop.loss(outputs, targets.to(loop.device))
    except Exception as exc:
        _raise_step_failure(loop, exc, phase, (inputs, targets), outputs)
    problem = loss_problem(loss)
    if problem is not None:
        given = f"outputs {describe_value(outputs)} and targets {describe_value(targets)}"
        raise UserCodeError(
            f"{describe_loss(loop.loss)} {problem} on the first batch ({given}): training on it"
            " would not be the training to profile; check the loss and the data"
        )
    return int(inputs.shape[0]) if inputs.dim() > 0 else 1
