"""Bad inputs to the parameter server answered in one line, before Ray starts or within
seconds: scenario files (non-whole or missing server counts, binary files) and Ray addresses
(malformed, or nobody listening)."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from unstall.errors import DataFileError, UnstallError
from unstall.ps import load_scenario
from unstall.ray_connect import check_reachable, split_address


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("servers = 2.5\n", "field 'servers': must be a whole number, got 2.5"),
        ('servers = "four"\n', "field 'servers': must be a whole number, got 'four'"),
        ("servers = 3\nspares = true\n", "field 'spares': must be a whole number, got True"),
        ("", "empty: a scenario sets at least `servers`"),
        ("name = 'typo'\nserver = 4\n", "server"),
    ],
)
def test_scenario_files_with_bad_counts_name_the_field(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "s.toml"
    path.write_text(text)
    with pytest.raises(DataFileError) as info:
        load_scenario(path)
    assert message in str(info.value) and str(path) in str(info.value)


def test_a_binary_scenario_file_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_bytes(b"\xff\xfe\x00\x81binary")
    with pytest.raises(DataFileError, match=r"s\.json, line 1: not UTF-8 text"):
        load_scenario(path)


@pytest.mark.parametrize(
    ("address", "parts"),
    [
        ("127.0.0.1:6379", ("127.0.0.1", 6379)),
        ("ray://head.example:10001", ("head.example", 10001)),
        ("[::1]:6379", ("::1", 6379)),
        ("auto", None),
        ("local", None),
    ],
)
def test_addresses_split_into_host_and_port(address: str, parts: object) -> None:
    assert split_address(address) == parts


@pytest.mark.parametrize("address", ["garbage", "127.0.0.1", "host:port", "h:0", "h:70000", ":1"])
def test_malformed_addresses_say_what_is_expected(address: str) -> None:
    with pytest.raises(UnstallError, match="want HOST:PORT"):
        split_address(address)


def test_nobody_listening_fails_in_seconds() -> None:
    with socket.socket() as probe:  # a loopback port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(UnstallError, match=f"cannot reach the Ray cluster at 127.0.0.1:{port}"):
        check_reachable(f"127.0.0.1:{port}")
    assert time.monotonic() - started < 6


def test_a_malformed_ray_address_variable_is_named_as_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The user never typed --address: the error names where the address came from."""
    from unstall import ray_connect

    monkeypatch.setenv("RAY_ADDRESS", "foo")
    with pytest.raises(UnstallError, match=r"^RAY_ADDRESS 'foo': want HOST:PORT"):
        ray_connect._connect(None, None, None, None)
    with pytest.raises(UnstallError, match=r"^--address 'bar': want HOST:PORT"):
        ray_connect._connect("bar", None, None, None)
