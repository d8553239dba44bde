"""unstall's errors cross process boundaries whole: a process pool or a Ray task re-raises them
in the caller by pickling, and an exception whose __init__ takes other arguments than its
message used to come back as a broken pool or an unpickling failure."""

from __future__ import annotations

import pickle
from concurrent.futures import ProcessPoolExecutor

import pytest

from unstall.errors import ConfigError, DataFileError, UnknownOptionError, UnstallError
from unstall.loop.checks import PolicyError
from unstall.traces.schema import TraceError

ERRORS: list[UnstallError] = [
    ConfigError("DallyConfig", "gain_margin", "must be > 0, got -1"),
    UnknownOptionError("dally", "wiat_factor", ["order", "wait_factor"]),
    DataFileError("jobs.csv", "not a number", line=7, field="num_gpus"),
    DataFileError("jobs.csv", "empty file"),
    TraceError("trace.csv", "no column 'submit_s'", field="submit_s"),
    PolicyError("mine", "job-3", "started twice"),
    PolicyError("mine", None, "returned None"),
]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_errors_survive_pickling_with_their_fields(error: UnstallError) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error)
    assert vars(back) == vars(error)


def test_notes_added_to_an_error_survive_pickling() -> None:
    error = ConfigError("DallyConfig", "gain_margin", "must be > 0")
    error.add_note("while reading sweep.toml")
    back = pickle.loads(pickle.dumps(error))
    assert back.__notes__ == ["while reading sweep.toml"]
    assert back.field == "gain_margin"


def _make_bad_dally() -> None:
    from unstall.sched import make_policy

    make_policy("dally", gain_margin=-1.0)


def test_a_config_error_in_a_worker_process_reaches_the_caller() -> None:
    with ProcessPoolExecutor(max_workers=1) as pool:
        future = pool.submit(_make_bad_dally)
        with pytest.raises(ConfigError, match="gain_margin") as caught:
            future.result(timeout=60)
    assert caught.value.field == "gain_margin"
