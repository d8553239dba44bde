"""What the parameter server trains, by name: a model and its data.

- a model: a zoo name with options (default: the scenario's model, an MLP), or user code
  (``FILE.py:FUNC``, ``package.module:FUNC``: a function returning an ``nn.Module``);
- data: ``synthetic`` (a zoo model's random batches, :func:`unstall.workload.zoo_jobs.zoo_data`),
  ``digits`` (scikit-learn's handwritten digits; a zoo features model gets 64 inputs and 10
  classes), or user code (``(rank, world_size) -> iterable of (inputs, targets)``).

Each callable comes back as a :class:`~unstall.workload.named.Named` whose label is the name,
so results say ``"model": "mlp"`` or ``"data": "digits"``. Every error is one line naming the
parameter (``ps.data``, ...), the file or the user's function. (Losses are named in
:mod:`unstall.workload.losses`, strategies beside :data:`~unstall.ps.strategies.STRATEGIES`,
scenarios beside :data:`~unstall.ps.scenarios.SCENARIOS`, optimizers beside
:data:`~unstall.ps.optim.OPTIMIZERS`.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from unstall.config import parse_text_options
from unstall.errors import ConfigError
from unstall.ps.data import ArrayData, load_digits
from unstall.ps.scenarios import Scenario
from unstall.usercode import is_reference, load_callable
from unstall.workload import zoo
from unstall.workload.named import Named
from unstall.workload.zoo_jobs import zoo_data, zoo_model

OWNER = "ps"
DEFAULT_MODEL = "mlp"
DEFAULT_BATCH_SIZE = 32
SYNTHETIC, DIGITS = "synthetic", "digits"
DATA_SOURCES = (SYNTHETIC, DIGITS)
# What a zoo model needs to learn the digits: 64 features in, 10 classes out.
DIGITS_MODEL_OPTIONS: dict[str, object] = {"in_features": 64, "num_classes": 10}


def resolve_model(
    text: str | None,
    options: Mapping[str, object] | None = None,
    *,
    scenario: Scenario | None = None,
    data: str = SYNTHETIC,
    owner: str = OWNER,
) -> Named:
    """A model by name: user code, or a zoo model (default: ``scenario``'s, with its options)
    with ``options`` (values, or ``KEY=VALUE`` texts typed by the model's options) and those
    ``data`` needs."""
    options = dict(options or {})
    if text is not None and is_reference(text):
        if options:
            raise ConfigError(owner, "model_options", "apply to zoo models, not to user code")
        return Named(load_callable(text, what="model function"), text)
    name = text or (scenario.model if scenario is not None else None) or DEFAULT_MODEL
    spec = zoo.spec(name)
    merged: dict[str, object] = {}
    if scenario is not None and name == scenario.model:
        merged.update(scenario.model_options)
    texts = [(k, v) for k, v in options.items() if isinstance(v, str)]
    merged.update(parse_text_options(spec.options_type, texts, owner=name))
    merged.update({k: v for k, v in options.items() if not isinstance(v, str)})
    if data == DIGITS:
        if spec.input_kind != "features":
            raise ConfigError(owner, "data", f"{data!r} needs a features model (mlp)")
        merged.update(DIGITS_MODEL_OPTIONS)
    return zoo_model(name, **merged)  # an unknown or bad option: a clear error now


def resolve_data(
    text: str,
    model: Named,
    *,
    batch_size: int | None = None,
    seed: int = 0,
    owner: str = OWNER,
) -> Named:
    """Data by name: ``synthetic`` batches of the zoo model ``model``, ``digits``, or user code
    (whose batches are its own: ``batch_size``, None for :data:`DEFAULT_BATCH_SIZE`, is for
    the built-in sources, and refused with user code rather than ignored)."""
    if is_reference(text):
        if batch_size is not None:
            raise ConfigError(
                owner,
                "batch_size",
                f"applies to the built-in data sources ({', '.join(DATA_SOURCES)}); the batches "
                f"of {text} are the size it makes them",
            )
        return Named(load_callable(text, what="data function"), text)
    if batch_size is None:
        batch_size = DEFAULT_BATCH_SIZE
    if text == DIGITS:
        features, labels = load_digits()
        return Named(ArrayData(features, labels, batch_size=batch_size, seed=seed), text)
    if text == SYNTHETIC:
        if is_reference(model.label) or model.label not in zoo.names():
            raise ConfigError(
                owner,
                "data",
                f"synthetic batches need a zoo model, and {model.label} is not one: give your "
                "data function (FILE.py:FUNC or package.module:FUNC)",
            )
        return Named(zoo_data(model.label, batch_size, seed, model.options), text)
    known = ", ".join(DATA_SOURCES)
    raise ConfigError(
        owner, "data", f"{text!r} is neither a source ({known}) nor FILE.py:FUNC / module:FUNC"
    )


def resolve_working_dir(text: str | None, *, owner: str = OWNER) -> dict[str, Any] | None:
    """A folder Ray ships to every node (its runtime environment), or None:
    :func:`unstall.ray_connect.working_dir_env`."""
    from unstall.ray_connect import working_dir_env  # imports Ray: only when a folder is named

    return None if text is None else working_dir_env(text, owner=owner)
