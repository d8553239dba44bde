"""The analyser's training run: SGD steps of a CNN, the last few recorded layer by layer.

Sparsity measured at initialisation says little about training, so :func:`profile_training`
first trains the model for ``warmup_steps`` plain SGD steps, then records ``steps`` more with the
hooks of :mod:`unstall.sparse.cnn.recording` on. It takes objects: a model (or a function that
builds one, called under the run's seed), an image source (default: learnable synthetic classes
drawn from the run's seed) and a loss. An :class:`AnalyzerConfig` is plain data: sizes, optimiser
settings, the seed, and the labels the result and the weight cache give the model and the data.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
import torch
from torch import nn

from unstall.config import check
from unstall.errors import ConfigError, UnstallError, a_or_an
from unstall.results import JsonResult
from unstall.sparse.cnn import train_cache
from unstall.sparse.cnn.data import ImageSource, PatternConfig, PatternImages, source_label
from unstall.sparse.cnn.densities import LayerSparsity, SparsityCounter
from unstall.sparse.cnn.recording import LayerTensors, out_of_place, record_step
from unstall.sparse.cnn.train_cache import TrainState
from unstall.usercode import call_user, user_code_error, where_defined

# A model, or a function that builds one (called under the run's seed, so the run is seeded).
CNNModel: TypeAlias = nn.Module | Callable[[], nn.Module]
LossFn: TypeAlias = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

SYNTHETIC = "synthetic patterns"  # what the result calls the default images


@dataclass(frozen=True, kw_only=True)
class AnalyzerConfig:
    """A short real training run whose last ``steps`` steps are recorded.

    ``warmup_steps`` of plain SGD run first, so that the recorded sparsity is that of a network
    that has trained for a while. ``model`` and ``data`` are labels, not names to look up: what
    the result and the weight cache call the model and the images (``data=None``: the image
    source's own label; the synthetic classes when no source is given). ``image_size`` and
    ``num_classes`` shape the synthetic classes (a given image source has its own).
    """

    model: str = "model"
    image_size: int = 64
    num_classes: int = 10
    batch_size: int = 8
    warmup_steps: int = 0
    steps: int = 1
    lr: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 5e-4
    clip_grad_norm: float | None = 5.0
    data: str | None = None
    seed: int = 0
    eval_images: int = 128  # accuracy after the warm-up, on this many fresh images (eval mode)

    def __post_init__(self) -> None:
        check(bool(self.model), self, "model", "must be a non-empty label")
        check(self.image_size >= 1, self, "image_size", "must be >= 1")
        check(self.num_classes >= 2, self, "num_classes", "must be >= 2")
        check(self.batch_size >= 1, self, "batch_size", "must be >= 1")
        check(self.warmup_steps >= 0, self, "warmup_steps", "must be >= 0")
        check(self.steps >= 1, self, "steps", "must be >= 1 (recorded steps)")
        check(self.lr > 0, self, "lr", "must be > 0")
        check(0 <= self.momentum < 1, self, "momentum", "must be in [0, 1)")
        check(self.weight_decay >= 0, self, "weight_decay", "must be >= 0")
        clip = self.clip_grad_norm
        check(clip is None or clip > 0, self, "clip_grad_norm", "must be > 0 or None")
        check(self.eval_images >= 1, self, "eval_images", "must be >= 1")


@dataclass(frozen=True, kw_only=True)
class TrainingSummary(JsonResult):
    """Evidence that the network trained: loss at the start and end of the warm-up."""

    warmup_steps: int
    warmup_loss_start: float | None  # mean over the first tenth of the warm-up steps
    warmup_loss_end: float | None  # mean over the last tenth
    warmup_accuracy_end: float | None  # training-batch accuracy over the last tenth
    recorded_loss: float
    recorded_accuracy: float  # training-batch accuracy over the recorded steps
    chance_loss: float  # ln(classes): the loss of a uniform guess
    eval_accuracy: float | None = None  # eval mode, fresh images, after the warm-up


@dataclass(frozen=True, kw_only=True)
class SparsityProfile(JsonResult):
    """Per-layer sparsity of a CNN's training step."""

    model: str
    image_size: int
    batch_size: int
    data: str
    layers: tuple[LayerSparsity, ...]
    training: TrainingSummary


# Fields that do not change the trained weights: how long to train, how many steps to record,
# how many images the accuracy after the warm-up is measured on.
_NOT_IN_KEY = frozenset({"warmup_steps", "steps", "eval_images"})


def checkpoint_key(config: AnalyzerConfig) -> str:
    """A short hash of everything in ``config`` that changes training (not the step counts)."""
    return train_cache.cache_key(
        {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}, _NOT_IN_KEY
    )


def checkpoint_prefix(config: AnalyzerConfig) -> str:
    """The start of the names of ``config``'s checkpoint files (the step count follows)."""
    return f"{config.model}-{config.image_size}px-b{config.batch_size}-{checkpoint_key(config)}"


def _build(model: CNNModel) -> nn.Module:
    built = model if isinstance(model, nn.Module) else call_user(model, what="model function")
    if not isinstance(built, nn.Module):
        culprit, _ = _model_culprit(model)
        returned = "None" if built is None else a_or_an(type(built).__name__)
        where = where_defined(culprit)
        why = f"must build an nn.Module; model function {where} returned {returned}"
        raise ConfigError("profile_training", "model", why)
    return out_of_place(built)


def _class_scores_loss(classes: int) -> LossFn:
    """The default loss, cross-entropy over the data's ``classes``, that first checks that the
    model gives a score for every class (torch's own "Target 7 is out of bounds" names neither
    the model nor the number it should give). More scores than classes train as they are (a
    model built for ImageNet's 1,000 classes on a folder of 5)."""

    def loss(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        check(
            outputs.ndim == 2 and outputs.shape[1] >= classes,
            "profile_training",
            "model",
            f"gives outputs of shape {tuple(outputs.shape)}, not a score for each of the "
            f"data's {classes} classes: its last layer must output {classes}",
        )
        return nn.functional.cross_entropy(outputs, targets)

    return loss


def _model_culprit(model: CNNModel) -> tuple[Callable[..., Any], str]:
    """What a failure in the model's forward or backward names, and how: the function that
    built the model (through ``functools.wraps`` wrappers and partials, the user's own), or a
    given module's ``forward``. A model built by a function is usually an ``nn.Sequential``
    whose forward is torch's, so the function is what leads the user to the faulty layers."""
    if isinstance(model, nn.Module):
        return model.forward, "model's forward"
    fn = model.func if isinstance(model, functools.partial) else model
    return inspect.unwrap(fn), "model from model function"


def _named_loss(loss: LossFn) -> LossFn:
    """The caller's loss, its failures named after it (the default cross-entropy's are the
    model's: outputs of the wrong shape or number of classes)."""

    def named(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return call_user(loss, outputs, targets, what="loss function")

    return named


def profile_training(
    model: CNNModel,
    data: ImageSource | None = None,
    *,
    config: AnalyzerConfig | None = None,
    loss: LossFn | None = None,
    on_layer: Callable[[LayerTensors], None] | None = None,
    progress: Callable[[int], None] | None = None,
    cache_dir: Path | None = None,
    checkpoint_every: int = 100,
) -> SparsityProfile:
    """Train ``model`` for ``warmup_steps`` + ``steps`` SGD steps on ``data``; record the last
    ``steps``.

    ``model`` is an ``nn.Module`` (trained in place) or a function that builds one; it is built
    under the run's seed, with its activations made out-of-place. ``data`` defaults to learnable
    synthetic classes (:class:`~unstall.sparse.cnn.data.PatternImages`) drawn from the run's
    seed; ``loss`` to cross-entropy. ``on_layer`` sees every layer's masks of every recorded step
    (the speed model uses them); ``progress(n)`` is called as steps finish. With ``cache_dir`` the
    warm-up resumes from the newest checkpoint of the same training
    (:mod:`unstall.sparse.cnn.train_cache`) and saves one every ``checkpoint_every`` steps and at
    its end.
    """
    config = config if config is not None else AnalyzerConfig()
    if config.data is None and data is not None:
        config = dataclasses.replace(config, data=source_label(data))
    seeds = np.random.SeedSequence(config.seed).generate_state(4)
    init_seed, data_seed, dropout_seed, eval_seed = (int(s) for s in seeds)
    if data is None:
        pattern = PatternConfig(num_classes=config.num_classes, image_size=config.image_size)
        data = PatternImages(pattern, data_seed)
    data_gen = torch.Generator().manual_seed(data_seed)
    loss_fn = _named_loss(loss) if loss is not None else _class_scores_loss(data.num_classes)
    with torch.random.fork_rng(devices=[]):  # model init and dropout, without touching the caller
        torch.manual_seed(init_seed)
        net = _build(model)
        torch.manual_seed(dropout_seed)
        net.train()
        optimizer = torch.optim.SGD(
            net.parameters(),
            lr=config.lr,
            momentum=config.momentum,
            weight_decay=config.weight_decay,
        )
        culprit = _model_culprit(model)
        run = _Run(net, optimizer, loss_fn, data, data_gen, config, progress, *culprit)
        warmup = run.warm_up(cache_dir, checkpoint_every)
        eval_accuracy = (
            _eval_accuracy(run, eval_seed, config.eval_images) if warmup.losses else None
        )
        counters, losses, correct = _recorded_steps(run, on_layer)
    layers = tuple(c.result(i) for i, c in enumerate(counters.values()))
    training = _training_summary(warmup, losses, correct, config, data.num_classes)
    training = dataclasses.replace(training, eval_accuracy=eval_accuracy)
    return SparsityProfile(
        model=config.model,
        image_size=config.image_size,
        batch_size=config.batch_size,
        data=config.data if config.data is not None else SYNTHETIC,
        layers=layers,
        training=training,
    )


@dataclass
class _Run:
    """A training run's parts: the model, its optimizer and loss, and where batches come from."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    loss_fn: LossFn
    source: ImageSource
    data_gen: torch.Generator
    config: AnalyzerConfig
    progress: Callable[[int], None] | None
    # What a failure of the model names, and how (see _model_culprit).
    culprit: Callable[..., Any]
    culprit_what: str

    @contextmanager
    def blame_model(self) -> Iterator[None]:
        """Whatever the model's forward or backward raises, as one line naming the model's
        origin (a shape mismatch in a user's model: a traceback deep in torch otherwise)."""
        try:
            yield
        except UnstallError:
            raise
        except Exception as exc:
            raise user_code_error(self.culprit, exc, what=self.culprit_what) from exc

    @property
    def prefix(self) -> str:
        return checkpoint_prefix(self.config)

    @property
    def key(self) -> str:
        return checkpoint_key(self.config)

    def warm_up(self, cache_dir: Path | None, checkpoint_every: int) -> TrainState:
        """The unrecorded SGD steps, resumed from and saved to ``cache_dir`` when given."""
        check(checkpoint_every >= 1, "profile_training", "checkpoint_every", "must be >= 1")
        total = self.config.warmup_steps
        state = (
            None if cache_dir is None else train_cache.load_latest(cache_dir, self.prefix, total)
        )
        if state is not None:
            self.model.load_state_dict(state.model)
            self.optimizer.load_state_dict(state.optimizer)
            self.data_gen.set_state(state.data_rng)
            torch.set_rng_state(state.torch_rng)
            if self.progress is not None and state.steps:
                self.progress(state.steps)
        else:
            state = TrainState(0, {}, {}, self.data_gen.get_state(), torch.get_rng_state(), [], [])
        for step in range(state.steps, total):
            loss, correct = self.plain_step()
            state.losses.append(loss)
            state.correct.append(correct)
            done = step + 1
            if cache_dir is not None and (done % checkpoint_every == 0 or done == total):
                state.steps = done
                state.model, state.optimizer = self.model.state_dict(), self.optimizer.state_dict()
                state.data_rng, state.torch_rng = self.data_gen.get_state(), torch.get_rng_state()
                train_cache.save(cache_dir, self.prefix, self.key, state)
        state.steps = total
        return state

    def plain_step(self) -> tuple[float, int]:
        """One unrecorded SGD step; returns its loss and its correct predictions."""
        images, labels = self.source.batch(self.config.batch_size, self.data_gen)
        self.optimizer.zero_grad(set_to_none=True)
        with self.blame_model():
            logits = self.model(images)
            loss = self.loss_fn(logits, labels)
            loss.backward()
        self.sgd_step()
        if self.progress is not None:
            self.progress(1)
        return float(loss.item()), int((logits.argmax(dim=1) == labels).sum().item())

    def sgd_step(self) -> None:
        if self.config.clip_grad_norm is not None:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.config.clip_grad_norm)
        self.optimizer.step()


def _eval_accuracy(run: _Run, seed: int, count: int) -> float:
    """Accuracy in eval mode on ``count`` images drawn with their own generator (fresh samples
    for the synthetic classes; for a folder, images of the training set)."""
    gen = torch.Generator().manual_seed(seed)
    model, source = run.model, run.source
    model.eval()
    correct = 0
    with torch.no_grad():
        for lo in range(0, count, 32):
            images, labels = source.batch(min(32, count - lo), gen)
            with run.blame_model():
                logits = model(images)
            correct += int((logits.argmax(dim=1) == labels).sum().item())
    model.train()
    return correct / count


def _recorded_steps(
    run: _Run, on_layer: Callable[[LayerTensors], None] | None
) -> tuple[dict[str, SparsityCounter], list[float], int]:
    """The recorded SGD steps: per-layer counters, losses, correct predictions."""
    counters: dict[str, SparsityCounter] = {}
    losses, correct = [], 0
    for _ in range(run.config.steps):
        images, labels = run.source.batch(run.config.batch_size, run.data_gen)
        run.optimizer.zero_grad(set_to_none=True)
        with run.blame_model():
            loss, logits, records = record_step(run.model, images, labels, run.loss_fn)
        run.sgd_step()
        losses.append(float(loss.item()))
        correct += int((logits.argmax(dim=1) == labels).sum().item())
        for record in records:
            counters.setdefault(record.name, SparsityCounter()).observe(record)
            if on_layer is not None:
                on_layer(record)
        del records  # the masks of a big model are hundreds of MB: free them before the next
        if run.progress is not None:
            run.progress(1)
    return counters, losses, correct


def _training_summary(
    warmup: TrainState,
    losses: list[float],
    correct: int,
    config: AnalyzerConfig,
    classes: int,
) -> TrainingSummary:
    w = warmup.losses
    tenth = max(1, len(w) // 10)
    last_correct = sum(warmup.correct[-tenth:])
    return TrainingSummary(
        warmup_steps=len(w),
        warmup_loss_start=sum(w[:tenth]) / tenth if w else None,
        warmup_loss_end=sum(w[-tenth:]) / tenth if w else None,
        warmup_accuracy_end=last_correct / (tenth * config.batch_size) if w else None,
        recorded_loss=sum(losses) / len(losses),
        recorded_accuracy=correct / (len(losses) * config.batch_size),
        chance_loss=math.log(classes),
    )
