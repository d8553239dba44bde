"""Arguments of the wrong kind to ``ps.fit``, ``ps.predict_iter_s``, ``ps.compare_strategies``
and ``ps.BenchCase`` (a strategy's name, a scenario's factory, ``"2"`` workers, a model already
built) are one-line ConfigErrors naming the parameter, raised before the model is built or Ray
is used; and ``ps.ArrayData`` takes torch tensors, refusing anything else when it is built. No
Ray starts in this module."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
import torch

from unstall import ps
from unstall.errors import ConfigError
from unstall.ps.data import BatchStream

MODEL = functools.partial(torch.nn.Linear, 4, 2)


def _never(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("Ray was used before the arguments were checked")


def _never_built() -> torch.nn.Module:
    raise AssertionError("the model was built before the arguments were checked")


@pytest.fixture(autouse=True)
def no_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run that got as far as Ray fails the test: every check must come before."""
    import unstall.ps.bench as bench
    import unstall.ps.train as train

    monkeypatch.setattr(train, "ray_for_run", _never)
    monkeypatch.setattr(bench, "ray_for_run", _never)


@pytest.fixture(scope="module")
def data() -> ps.ArrayData:
    features = np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32)
    return ps.ArrayData(features, (features.sum(axis=1) > 0).astype(np.int64), batch_size=8)


def raised(call: Any, *args: Any, **kwargs: Any) -> str:
    """The message of the ConfigError ``call`` raises, checked to be one line."""
    with pytest.raises(ConfigError) as info:
        call(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        # the mistakes users make, with what to write instead
        ({"strategy": "hash"}, "fit.strategy: unknown strategy 'hash'; known: mxnet, byteps"),
        ({"strategy": ps.PSLDStrategy}, "got the class PSLDStrategy: call it, ps.PSLDStrategy()"),
        ({"strategy": None}, "fit.strategy: must be a Strategy"),
        ({"scenario": "congested"}, "fit.scenario: 'congested' is neither a preset (none,"),
        (
            {"scenario": ps.SCENARIOS["bandwidth"]},
            "fit.scenario: must be a Scenario, got the function bandwidth: call it, "
            'ps.SCENARIOS["bandwidth"]()',
        ),
        ({"scenario": lambda: None}, "fit.scenario: must be a Scenario"),
        ({"optimizer": "adagrad"}, "fit.optimizer: unknown optimizer 'adagrad'; known: sgd, adam"),
        ({"optimizer": ps.AdamConfig}, "got the class AdamConfig: call it, ps.AdamConfig()"),
        ({"optimizer": torch.optim.Adam}, "fit.optimizer: must be an optimizer"),
        ({"optimizer": 0.01}, "fit.optimizer: must be an optimizer"),
        ({"workers": "2"}, "fit.workers: must be an integer, got str '2'"),
        ({"workers": True}, "fit.workers: must be an integer, got True"),
        ({"seed": "x"}, "fit.seed: must be an integer, got str 'x'"),
        ({"seed": -1}, "fit.seed: must be >= 0, got -1"),
        ({"seed": 2**64}, "fit.seed: must be <= 18446744073709551615"),
        ({"iterations": 2.5}, "fit.iterations: must be an integer, got float 2.5"),
        # every other parameter
        ({"loss": "hinge"}, "fit.loss: 'hinge' is neither a loss (cross_entropy, mse)"),
        ({"loss": 3}, "fit.loss: must be a function loss(outputs, targets) that returns a scalar"),
        ({"loss": torch.nn.MSELoss}, "got the class MSELoss: build one, torch.nn.MSELoss()"),
        ({"servers": "3"}, "fit.servers: must be an integer, got str '3'"),
        ({"servers": 0}, "fit.servers: must be >= 1, got 0"),
        ({"spares": 1.0}, "fit.spares: must be an integer, got float 1.0"),
        ({"check_reference": "yes"}, "fit.check_reference: must be True or False, got str 'yes'"),
        (
            {"resume": "run.ckpt"},
            "fit.resume: must be a PSCheckpoint or None, got str 'run.ckpt': load the file, "
            "ps.PSCheckpoint.load('run.ckpt')",
        ),
        ({"checkpoint_every": 2.0}, "fit.checkpoint_every: must be an integer, got float 2.0"),
        ({"on_checkpoint": "ckpt.pt"}, "fit.on_checkpoint: must be a function"),
        ({"max_recoveries": None}, "fit.max_recoveries: must be an integer, got None"),
        ({"snapshot_every": "1"}, "fit.snapshot_every: must be an integer, got str '1'"),
        ({"address": 6379}, "fit.address: must be a string or None, got int 6379"),
        ({"runtime_env": ["."]}, "fit.runtime_env: must be a dict or None, got a list"),
        ({"timeout_s": "60"}, "fit.timeout_s: must be a number, got str '60'"),
        ({"piece_mb": float("inf")}, "fit.piece_mb: must be a finite number > 0, got inf"),
        ({"step_threads": "2"}, "fit.step_threads: must be an integer, got str '2'"),
        ({"pool": "session"}, "fit.pool: must be a ps.ActorPool or None, got str 'session'"),
        ({"progress": 1}, "fit.progress: must be a function progress(iterations_done) or None"),
        (
            {"check_progress": "bar"},
            "fit.check_progress: must be a function check_progress(iterations_replayed) or None",
        ),
    ],
)
def test_fit_names_an_argument_of_the_wrong_kind(
    data: ps.ArrayData, arguments: dict[str, Any], expected: str
) -> None:
    assert expected in raised(ps.fit, MODEL, data, **arguments)


def test_a_module_instance_as_the_model_says_to_pass_what_builds_it(data: ps.ArrayData) -> None:
    message = raised(ps.fit, torch.nn.Linear(4, 2), data)
    assert message.startswith(
        "fit.model: must be a function (or class) that returns an nn.Module, got a Linear "
        "instance: pass what builds one, e.g. functools.partial(torch.nn.Linear, ...)"
    )
    assert "predict_iter_s.model: " in raised(ps.predict_iter_s, torch.nn.Linear(4, 2))
    assert "unknown model 'nosuch'" in raised(ps.fit, "nosuch", data)


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        (3, "got int 3"),
        ([(torch.zeros(2, 4), torch.zeros(2))], "got a list"),
        (ps.ArrayData, "got the class ArrayData: build one, ps.ArrayData(...)"),
    ],
)
def test_data_that_is_no_data_function_is_named(bad: Any, expected: str) -> None:
    message = raised(ps.fit, MODEL, bad)
    assert message.startswith("fit.data: must be a function data(rank, world_size)")
    assert expected in message


def test_arguments_are_checked_before_the_model_is_built(data: ps.ArrayData) -> None:
    assert "fit.workers" in raised(ps.fit, _never_built, data, workers="2")


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (
            {"strategy": "hash"},
            "predict_iter_s.strategy: unknown strategy 'hash'; known: mxnet",
        ),
        ({"scenario": ps.SCENARIOS["none"]}, 'call it, ps.SCENARIOS["none"]()'),
        ({"servers": "2"}, "predict_iter_s.servers: must be an integer"),
        ({"workers": 2.0}, "predict_iter_s.workers: must be an integer, got float 2.0"),
        ({"workers": 0}, "predict_iter_s.workers: must be >= 1, got 0"),
        ({"iterations": "20"}, "predict_iter_s.iterations: must be an integer"),
        ({"iterations": 0}, "predict_iter_s.iterations: must be >= 1, got 0"),
        ({"seed": None}, "predict_iter_s.seed: must be an integer, got None"),
    ],
)
def test_predict_iter_s_names_an_argument_of_the_wrong_kind(
    arguments: dict[str, Any], expected: str
) -> None:
    assert expected in raised(ps.predict_iter_s, MODEL, **arguments)


def test_numpy_integers_are_counts() -> None:
    plain = ps.predict_iter_s(MODEL, workers=2, iterations=4, servers=3)
    numpy = ps.predict_iter_s(
        MODEL, workers=np.int64(2), iterations=np.int32(4), servers=np.int64(3)
    )
    assert numpy == plain


# --- compare_strategies and BenchCase (ps bench's front door) ---------------------------------


@pytest.fixture(scope="module")
def case(data: ps.ArrayData) -> ps.BenchCase:
    return ps.BenchCase(scenario=ps.SCENARIOS["none"](), model=MODEL, data=data)


@pytest.mark.parametrize(
    ("field", "bad", "expected"),
    [
        (
            "scenario",
            "congested",
            "BenchCase.scenario: 'congested' is neither a preset (none,",
        ),
        ("scenario", ps.SCENARIOS["dynamic"], 'call it, ps.SCENARIOS["dynamic"]()'),
        ("scenario", None, "BenchCase.scenario: must be a Scenario"),
        (
            "model",
            torch.nn.Linear(4, 2),
            "BenchCase.model: must be a function (or class) that "
            "returns an nn.Module, got a Linear instance: pass what builds one, e.g. "
            "functools.partial(torch.nn.Linear, ...)",
        ),
        (
            "model",
            "mlp",
            "BenchCase.model: must be a function (or class) that returns an "
            "nn.Module, got str 'mlp'",
        ),
        ("data", "digits", "BenchCase.data: must be a function data(rank, world_size)"),
        ("data", ps.SyntheticData, "got the class SyntheticData: build one, ps.SyntheticData(...)"),
        (
            "loss",
            "hinge",
            "BenchCase.loss: 'hinge' is neither a loss (cross_entropy, mse)",
        ),
        ("loss", torch.nn.CrossEntropyLoss, "build one, torch.nn.CrossEntropyLoss()"),
    ],
)
def test_a_bench_case_names_a_field_of_the_wrong_kind_when_built(
    data: ps.ArrayData, field: str, bad: Any, expected: str
) -> None:
    fields: dict[str, Any] = {"scenario": ps.SCENARIOS["none"](), "model": MODEL, "data": data}
    assert expected in raised(ps.BenchCase, **{**fields, field: bad})


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (
            {"strategies": "psld,hash"},
            "compare_strategies.strategies[1]: unknown strategy 'hash'; known: mxnet",
        ),
        (
            {"strategies": ps.STRATEGIES},
            "got a dict: give its strategies, e.g. list(ps.STRATEGIES.values())",
        ),
        ({"strategies": ps.STRATEGIES["psld"]}, "put it in a list, [strategy]"),
        (
            {"strategies": [ps.STRATEGIES["mxnet"], 3]},
            'compare_strategies.strategies[1]: must be a Strategy or its name (e.g. "psld", '
            'ps.STRATEGIES["psld"]), got int 3',
        ),
        (
            {"strategies": [ps.PSLDStrategy]},
            'strategies[0]: must be a Strategy or its name (e.g. "psld", '
            'ps.STRATEGIES["psld"]), got the class PSLDStrategy: call it, ps.PSLDStrategy()',
        ),
        ({"workers": "2"}, "compare_strategies.workers: must be an integer, got str '2'"),
        ({"workers": 0}, "compare_strategies.workers: must be >= 1, got 0"),
        ({"spares": -1}, "compare_strategies.spares: must be >= 0, got -1"),
        ({"iterations": 10.0}, "compare_strategies.iterations: must be an integer, got float"),
        ({"iterations": 0}, "compare_strategies.iterations: must be >= 1, got 0"),
        ({"seed": "0"}, "compare_strategies.seed: must be an integer, got str '0'"),
        (
            {"optimizer": "adagrad"},
            "compare_strategies.optimizer: unknown optimizer 'adagrad'; known: sgd, adam",
        ),
        ({"optimizer": torch.optim.SGD}, "from torch.optim: give its settings instead"),
        ({"address": 6379}, "compare_strategies.address: must be a string or None, got int"),
        ({"runtime_env": "."}, "compare_strategies.runtime_env: must be a dict or None, got str"),
        ({"pool": "session"}, "compare_strategies.pool: must be a ps.ActorPool or None"),
        ({"progress": True}, "compare_strategies.progress: must be a function"),
    ],
)
def test_compare_strategies_names_an_argument_of_the_wrong_kind(
    case: ps.BenchCase, arguments: dict[str, Any], expected: str
) -> None:
    call: dict[str, Any] = {"strategies": [ps.STRATEGIES["psld"]], **arguments}
    assert expected in raised(ps.compare_strategies, [case], **call)


@pytest.mark.parametrize(
    ("cases", "expected"),
    [
        (
            "bandwidth",
            "compare_strategies.cases: must be a list of ps.BenchCase(scenario=..., model=..., "
            "data=...), got str 'bandwidth'",
        ),
        (ps.SCENARIOS["none"](), "got a Scenario instance: wrap it, ps.BenchCase("),
        (
            [],
            "compare_strategies.cases: must be a list of ps.BenchCase(scenario=..., model=..., "
            "data=...), got an empty one",
        ),
        (
            [ps.SCENARIOS["none"]()],
            "compare_strategies.cases[0]: must be a ps.BenchCase("
            "scenario=..., model=..., data=...), got a Scenario instance: wrap it",
        ),
        (None, "compare_strategies.cases: must be a list of ps.BenchCase"),
    ],
)
def test_compare_strategies_names_cases_that_are_no_bench_cases(cases: Any, expected: str) -> None:
    assert expected in raised(ps.compare_strategies, cases, [ps.STRATEGIES["psld"]])


def test_one_bench_case_outside_a_list_is_named(case: ps.BenchCase) -> None:
    assert "compare_strategies.cases: must be a list of ps.BenchCase" in raised(
        ps.compare_strategies, case, [ps.STRATEGIES["psld"]]
    )
    assert "got a BenchCase instance: put it in a list" in raised(
        ps.compare_strategies, case, [ps.STRATEGIES["psld"]]
    )


def test_compare_strategies_takes_what_the_command_line_and_scripts_give(
    case: ps.BenchCase,
) -> None:
    """Any iterable of cases and of strategies, numpy counts: checked, then on to Ray."""
    with pytest.raises(AssertionError, match="Ray was used"):
        ps.compare_strategies(
            (c for c in [case]),
            (ps.STRATEGIES["psld"], ps.PSLDStrategy()),
            workers=np.int64(2),
            iterations=np.int32(3),
            optimizer=ps.AdamConfig(),
            runtime_env={"working_dir": "."},
        )


# --- ArrayData ------------------------------------------------------------------------------


def test_array_data_takes_torch_tensors_as_numpy_arrays() -> None:
    features = torch.randn(20, 4, requires_grad=True)
    labels = (features.detach().sum(dim=1) > 0).long()
    from_tensors = ps.ArrayData(features, labels, batch_size=3, seed=1)
    from_arrays = ps.ArrayData(
        features.detach().numpy().copy(), labels.numpy().copy(), batch_size=3, seed=1
    )
    assert isinstance(from_tensors.features, np.ndarray)
    assert isinstance(from_tensors.labels, np.ndarray)
    with torch.no_grad():
        features.zero_()  # the caller's tensor changes after: the batches do not
    # What a worker does with its data function (BatchStream), for two workers.
    for rank in range(2):
        got = BatchStream(from_tensors, rank, 2, seed=0)
        want = BatchStream(from_arrays, rank, 2, seed=0)
        for iteration in range(5):
            (x, y), (wx, wy) = got.next(iteration), want.next(iteration)
            assert torch.equal(x, wx) and torch.equal(y, wy)
            assert (x.dtype, y.dtype) == (torch.float32, torch.int64)


@pytest.mark.parametrize(
    ("features", "labels", "options", "expected"),
    [
        (
            [[0.0]] * 4,
            np.zeros(4),
            {},
            "ArrayData.features: must be a numpy array or a torch tensor, got a list",
        ),
        (
            np.zeros((4, 2)),
            list(range(4)),
            {},
            "ArrayData.labels: must be a numpy array or a torch tensor, got a list",
        ),
        (np.zeros((4, 2)), np.array(3), {}, "ArrayData.labels: must have a dimension of samples"),
        (np.array([{}] * 4), np.zeros(4), {}, "ArrayData.features: has dtype object"),
        (
            torch.zeros(4, 2, dtype=torch.bfloat16),
            np.zeros(4),
            {},
            "ArrayData.features: is a bfloat16 tensor",
        ),
        (
            torch.zeros(4, 2).to_sparse(),
            np.zeros(4),
            {},
            "ArrayData.features: cannot become a numpy array",
        ),
        (np.zeros((4, 2)), np.zeros(3), {}, "ArrayData.features: must have 3 rows"),
        (
            np.zeros((4, 2)),
            np.zeros(4),
            {"batch_size": "8"},
            "ArrayData.batch_size: must be an integer, got str '8'",
        ),
        (
            np.zeros((4, 2)),
            np.zeros(4),
            {"batch_size": 8.0},
            "ArrayData.batch_size: must be an integer, got float 8.0",
        ),
        (
            np.zeros((4, 2)),
            np.zeros(4),
            {"batch_size": 0},
            "ArrayData.batch_size: must be >= 1, got 0",
        ),
        (np.zeros((4, 2)), np.zeros(4), {"seed": -1}, "ArrayData.seed: must be >= 0, got -1"),
    ],
)
def test_array_data_refuses_what_workers_cannot_slice_when_built(
    features: Any, labels: Any, options: dict[str, Any], expected: str
) -> None:
    assert expected in raised(ps.ArrayData, features, labels, **options)


def test_synthetic_data_checks_its_fields_when_built() -> None:
    assert "SyntheticData.batch_size: must be an integer, got str '8'" in raised(
        ps.SyntheticData, lambda n, generator: (None, None), batch_size="8"
    )
    assert "SyntheticData.make_batch: must be a function" in raised(ps.SyntheticData, "mlp")
