"""Which of several failed workers' errors the parent reports: the user's, not the peers'."""

from __future__ import annotations

import multiprocessing
import sys
import types
from pathlib import Path

import pytest

from unstall.errors import UnstallError
from unstall.profile.failures import (
    any_started,
    check_not_bootstrapping,
    check_script_runs_again,
    mark_started,
    rerun_script,
    worker_error,
    write_error,
)
from unstall.usercode import UserCodeError


def test_the_users_error_wins_over_earlier_and_later_peer_failures(tmp_path: Path) -> None:
    out = str(tmp_path / "raw.json")
    assert worker_error(out) is None
    write_error(out, 1, RuntimeError("[pair.cc:553] Connection closed by peer\nGLHF"))
    assert worker_error(out) == "RuntimeError: [pair.cc:553] Connection closed by peer"
    write_error(out, 2, UnstallError("profile check failed"))
    assert worker_error(out) == "profile check failed"
    write_error(out, 0, UserCodeError("loss function loss_crash (x.py:5) failed: NameError"))
    write_error(out, 3, UserCodeError("a later user error"))
    assert worker_error(out) == "loss function loss_crash (x.py:5) failed: NameError"


def test_a_record_cut_short_is_skipped(tmp_path: Path) -> None:
    out = str(tmp_path / "raw.json")
    Path(f"{out}.error.0").write_text('{"kind": "us', encoding="utf-8")
    write_error(out, 1, RuntimeError("peer gone"))
    assert worker_error(out) == "RuntimeError: peer gone"


def test_workers_that_never_started_are_told_apart(tmp_path: Path) -> None:
    out = str(tmp_path / "raw.json")
    assert not any_started(out)
    write_error(out, 0, RuntimeError("peer gone"))
    assert not any_started(out)  # an error record is not a start
    mark_started(out, 1)
    assert any_started(out)


def _main(monkeypatch: pytest.MonkeyPatch, **attributes: object) -> None:
    main = types.ModuleType("__main__")
    main.__spec__ = None
    for name, value in attributes.items():
        setattr(main, name, value)
    monkeypatch.setitem(sys.modules, "__main__", main)


def test_the_script_spawn_runs_again_is_found_as_spawn_finds_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    script = tmp_path / "train.py"
    script.write_text("", encoding="utf-8")
    _main(monkeypatch, __file__=str(script))
    assert rerun_script() == str(script)
    check_script_runs_again()  # a file: nothing to say
    _main(monkeypatch)  # python -c, a notebook: nothing is run again
    assert rerun_script() is None
    check_script_runs_again()
    _main(monkeypatch, __spec__=types.SimpleNamespace(name="pkg.__main__"))
    assert rerun_script() is None  # python -m pkg: spawn leaves a package's __main__ alone
    _main(monkeypatch, __spec__=types.SimpleNamespace(name="pkg.train"))
    assert rerun_script() == "pkg.train"
    _main(monkeypatch, __file__="<stdin>")
    with pytest.raises(UnstallError, match=r"'<stdin>' is not a file \(a script read from stdin"):
        check_script_runs_again()


def test_profiling_from_a_worker_spawn_is_starting_is_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    check_not_bootstrapping()  # the test process is no worker
    running = types.ModuleType("__mp_main__")
    running.__file__ = "/somewhere/train.py"
    monkeypatch.setitem(sys.modules, "__mp_main__", running)
    monkeypatch.setattr(multiprocessing.current_process(), "_inheriting", True, raising=False)
    with pytest.raises(UnstallError) as info:
        check_not_bootstrapping()
    assert str(info.value) == (
        "the profiling workers are started with spawn, which runs the calling script"
        " (/somewhere/train.py) again in each worker: the script must guard its top-level code"
        ' with `if __name__ == "__main__":` (or call the profiler from an importable file)'
    )


# --- failures inside a training step -------------------------------------------------------------

STEP_CODE = """
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 2)

    def forward(self, x):
        if x.shape[0] == 3:
            raise ValueError("three is a crowd")
        return self.layer(x)


def model():
    return Net()
"""


def _raised(fn: object, *args: object) -> BaseException:
    """What ``fn(*args)`` raised, its traceback starting in ``fn`` (as a step's would start in
    unstall's code, not in this test's)."""
    try:
        fn(*args)  # type: ignore[operator]
    except Exception as exc:
        assert exc.__traceback__ is not None
        return exc.with_traceback(exc.__traceback__.tb_next)
    raise AssertionError("did not raise")


def test_a_step_failure_names_the_users_line_even_for_code_sent_by_value(tmp_path: Path) -> None:
    # A worker gets the user's file by value: its code has no file name ("<dynamic-code>"); the
    # module's __file__ still names the file, and the line is the raise in the user's forward.
    import cloudpickle
    import torch
    from torch import nn

    from unstall.profile.failures import step_failure
    from unstall.usercode import load_callable

    path = tmp_path / "stepnet.py"
    path.write_text(STEP_CODE, encoding="utf-8")
    make = cloudpickle.loads(cloudpickle.dumps(load_callable(f"{path}:model")))
    inputs, targets = torch.randn(3, 4), torch.zeros(3, dtype=torch.long)
    exc = _raised(make(), inputs)
    failure = step_failure(
        exc,
        phase="forward",
        model_fn=make,
        loss=nn.CrossEntropyLoss(),
        inputs=inputs,
        targets=targets,
    )
    assert isinstance(failure, UserCodeError)
    message = str(failure)
    assert f" at {path}:13 in Net.forward on a batch of inputs float32 (3, 4)" in message, message
    assert message.startswith("the model of model function model (")
    assert message.endswith("targets int64 (3,): ValueError: three is a crowd"), message


def test_a_step_failure_inside_torch_names_the_batch_and_a_peers_failure_stays_as_it_is() -> None:
    import torch
    import torch.distributed as dist
    from torch import nn

    from unstall.profile.failures import step_failure, user_frame

    inputs, targets = torch.randn(2, 5), torch.zeros(2)
    loss = nn.CrossEntropyLoss()
    exc = _raised(loss, torch.randn(2, 3), targets)
    failure = step_failure(
        exc,
        phase="loss",
        model_fn=None,
        loss=loss,
        inputs=inputs,
        targets=targets,
        outputs=torch.randn(2, 3),
    )
    assert isinstance(failure, UserCodeError)
    assert str(failure).startswith(
        "the loss CrossEntropyLoss failed on outputs float32 (2, 3) and targets float32 (2,): "
        "RuntimeError: expected target dtype"
    ), failure
    # A peer that left the group: reported as it is, not as the user's error.
    for gone in (
        RuntimeError("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed"),
        dist.DistBackendError("the peer left"),
    ):
        assert step_failure(gone, phase="forward", model_fn=None, loss=loss) is gone
    # ... also when it reached the process through the user's code (a collective in a forward).
    try:
        exec(compile("raise dist.DistBackendError('peer left')", "/home/u/net.py", "exec"))
    except dist.DistBackendError as inside:
        assert user_frame(inside) == "/home/u/net.py:1 in <module>"
        assert step_failure(inside, phase="forward", model_fn=None, loss=loss) is inside
    # Not the user's code, in a phase that runs none of it: as it is.
    other = RuntimeError("out of memory")
    assert step_failure(other, phase="backward", model_fn=None, loss=loss) is other
