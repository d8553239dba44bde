"""Your own training loop, scheduled by unstall's live backend: ``def train(ctx)``.

unstall starts the job's processes (one per GPU), forms their ``torch.distributed`` group and
calls ``train(ctx)`` in each; the loop does the rest, as it would under ``torchrun``, and asks
``ctx`` four things: the state to resume from, whether to stop (the scheduler preempts or
migrates the job), to keep a checkpoint, and to report its progress. A job stopped after its
checkpoint resumes from it elsewhere and ends as if it had never moved::

    unstall live run --policy tiresias --compute real --train examples/train_loop.py:train \\
        --max-jobs 4 --speedup 20 --log-dir logs

Each trace job then trains this small MLP for its trace duration's worth of iterations (divided
by ``--speedup``), and ``logs/<job>.log`` holds what its processes printed and reported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
from torch import nn

if TYPE_CHECKING:
    from unstall.live import TrainContext

# Iterations between two reports of the loss.
REPORT_EVERY = 100


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))


def batch(step: int, rank: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's batch of ``step``: drawn from the step itself, so that a job resumed at
    any step sees the batches an uninterrupted run would have seen."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step * 1_009 + rank)
    inputs = torch.randn(8, 16, generator=generator)
    return inputs, inputs[:, :4].argmax(dim=1)  # a class the model can learn


def train(ctx: TrainContext) -> None:
    torch.manual_seed(ctx.seed)  # every rank builds the same initial weights
    model = make_model().to(ctx.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    step = 0
    state = ctx.restore()  # None on a fresh start
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
    print(f"rank {ctx.rank} of {ctx.world_size} starts at step {step} on {ctx.device}")
    ddp = nn.parallel.DistributedDataParallel(model, process_group=ctx.group)

    def checkpoint() -> dict[str, Any]:
        return {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}

    while step < ctx.iterations:
        inputs, targets = batch(step, ctx.rank, ctx.seed)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(ddp(inputs.to(ctx.device)), targets.to(ctx.device))
        loss.backward()
        optimizer.step()
        step += 1
        if step % REPORT_EVERY == 0:
            ctx.report(step=step, loss=loss)
        if ctx.should_stop():  # every rank hears the same, after the same step
            ctx.save(checkpoint(), step=step)
            return
        if ctx.checkpoint_due():  # every --checkpoint-every-s: what a lost process costs
            ctx.save(checkpoint(), step=step)
    ctx.save(checkpoint(), step=step)  # the final state, kept like any checkpoint
