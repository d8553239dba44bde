"""The executors' checkpoint store on Ray: over durable files (the service's) Ray restarts it
where its process dies and it answers with what its files hold."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from unstall.live.executor import RemoteStore
from unstall.live.pool import store_restarts


def _pid(_store: object) -> int:
    return os.getpid()


def test_a_durable_store_comes_back_with_its_checkpoints(ray_session: Any, tmp_path: Path) -> None:
    ray = ray_session
    store = RemoteStore.options(**store_restarts(True)).remote(str(tmp_path))
    ray.get(store.save.remote("job-1", 42.0, b"state"))
    before = ray.get(store.__ray_call__.remote(_pid))
    ray.kill(store, no_restart=False)  # its process dies, as under Ray's memory monitor
    deadline = time.monotonic() + 60
    while ray.get(store.__ray_call__.remote(_pid), timeout=60) == before:
        assert time.monotonic() < deadline, "the store was not restarted"
        time.sleep(0.2)  # the kill is asynchronous
    assert ray.get(store.iteration.remote("job-1"), timeout=60) == 42.0
    assert ray.get(store.load.remote("job-1"))[1] == b"state"
    ray.kill(store, no_restart=True)
