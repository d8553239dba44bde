"""The service's API as a client meets it, without a Ray cluster: the scheduler is built but not
started (its executors never come up), so what is checked here is what the API and the store do
with a request: the records, the refusals naming their field, tokens and who may cancel."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from service_helpers import unstarted_service
from unstall.live.config import LiveConfig
from unstall.service.api import MAX_BODY_BYTES, create_app
from unstall.service.service import Caller, Service, read_tokens
from unstall.service.store import JobStore

ADMIN = "admin-token-0123456789"
ALICE = "alice-token-0123456789"
BOB = "bob-token-0123456789ab"


def _service(tmp_path: Path, tokens: dict[str, Caller] | None = None) -> Service:
    return unstarted_service(tmp_path / "store", tokens)


@pytest.fixture
def open_api(tmp_path: Path) -> TestClient:
    return TestClient(create_app(_service(tmp_path)), headers={"X-Unstall-User": "alice"})


def test_a_submitted_job_is_pending_first_in_the_queue_and_stored(
    open_api: TestClient, tmp_path: Path
) -> None:
    answer = open_api.post(
        "/api/jobs", json={"gpus": 2, "model": "resnet50", "duration_s": 60, "name": "r"}
    )
    assert answer.status_code == 201, answer.text
    record = answer.json()
    assert record["state"] == "pending" and record["user"] == "alice" and record["position"] == 1
    assert record["gpus"] == 2 and record["name"] == "r" and record["submitted_at"] > 0
    listed = open_api.get("/api/jobs").json()
    assert [j["id"] for j in listed] == [record["id"]]
    detail = open_api.get(f"/api/jobs/{record['id']}").json()
    assert detail["spec"]["model"] == "resnet50"
    assert [e["kind"] for e in detail["events"]] == ["submitted"]
    # The store has it: a new service over the same directory finds it.
    found = JobStore(tmp_path / "store").load()
    assert list(found) == [record["id"]] and found[record["id"]].state == "pending"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"gpus": -1, "model": "resnet50", "duration_s": 60}, "gpus"),
        ({"gpus": "two", "model": "resnet50", "duration_s": 60}, "gpus"),
        ({"gpus": 5, "model": "resnet50", "duration_s": 60}, "gpus"),  # the cluster has 4
        ({"gpus": 1, "model": "no-such-net", "duration_s": 60}, "model"),
        ({"gpus": 1, "model": "resnet50"}, "iterations and duration_s"),
        ({"gpus": 1, "duration_s": 60}, "model"),
        ({"gpus": 1, "train": "not a reference", "iterations": 5}, "train"),
        ({"gpus": 1, "model": "resnet50", "duration_s": 60, "files": {"../x.py": ""}}, "files"),
        ({"gpus": 1, "model": "resnet50", "duration_s": 60, "colour": "red"}, "colour"),
        ({"gpus": 1, "train": "loop.py:train", "iterations": 5}, "train"),  # emulated compute
        (
            {
                "gpus": 1,
                "model_fn": "m.py:f",
                "data_fn": "m.py:d",
                "loss": "m.py:l",
                "iterations": 5,
            },
            "model_fn",
        ),  # emulated compute runs no user code
    ],
)
def test_bad_submissions_get_422_naming_the_field(
    open_api: TestClient, body: dict[str, object], field: str
) -> None:
    answer = open_api.post("/api/jobs", json=body)
    assert answer.status_code == 422, answer.text
    assert field in answer.json()["detail"]
    assert open_api.get("/api/jobs").json() == []  # nothing stored


USER_FILES = {"m.py": "def f(): ...\ndef d(r, w): ...\ndef l(o, t): ...\n"}
USER_JOB = {
    "gpus": 1,
    "model_fn": "m.py:f",
    "data_fn": "m.py:d",
    "loss": "m.py:l",
    "iterations": 5,
    "files": USER_FILES,
}


@pytest.fixture
def real_api(tmp_path: Path) -> TestClient:
    """A service that would train for real (its scheduler not started: nothing runs)."""
    service = unstarted_service(tmp_path / "store", config=LiveConfig(compute="real"))
    return TestClient(create_app(service), headers={"X-Unstall-User": "alice"})


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"model_fn": "other.py:f"}, "model_fn: other.py is not among the job's files"),
        ({"data_fn": "other.py:d"}, "data_fn: other.py is not among the job's files"),
        ({"loss": "other.py:l"}, "loss: other.py is not among the job's files"),
        ({"files": {}}, "model_fn: m.py is not among the job's files"),
        ({"loss": "hinge"}, "loss: 'hinge' is neither a loss (cross_entropy, mse)"),
        ({"model_fn": "m.py:1f"}, "model_fn: must name a function"),  # not an identifier
        ({"data_fn": "m.py:d.x"}, "data_fn: must name a function"),
        ({"loss": "m.py:l-1"}, "loss: must name a function"),
        ({"loss": "cross entropy"}, "loss: must name a function"),
        ({"data_fn": None}, "model_fn needs data_fn and loss too"),
        ({"model": "resnet50"}, "not model and model_fn"),
        ({"train": "m.py:f"}, "not train and model_fn"),
        ({"model_fn": None, "model": "mlp"}, "data_fn and loss go with model_fn"),
        ({"model_fn": None, "data_fn": None, "loss": None, "train": "t.py:train"}, "train: t.py"),
    ],
)
def test_a_users_model_data_and_loss_are_refused_naming_the_field_in_real_compute(
    real_api: TestClient, change: dict[str, object], said: str
) -> None:
    body = {k: v for k, v in {**USER_JOB, **change}.items() if v is not None}
    answer = real_api.post("/api/jobs", json=body)
    assert answer.status_code == 422, answer.text
    assert said in answer.json()["detail"]
    assert real_api.get("/api/jobs").json() == []  # nothing stored


@pytest.mark.parametrize("loss", ["m.py:l", "cross_entropy", "mse"])
def test_a_users_model_data_and_loss_are_stored_and_named_by_their_stored_files(
    tmp_path: Path, loss: str
) -> None:
    service = unstarted_service(tmp_path / "store", config=LiveConfig(compute="real"))
    api = TestClient(create_app(service), headers={"X-Unstall-User": "alice"})
    answer = api.post("/api/jobs", json={**USER_JOB, "loss": loss})
    assert answer.status_code == 201, answer.text
    job = answer.json()["id"]
    assert api.get(f"/api/jobs/{job}").json()["spec"]["model_fn"] == "m.py:f"
    code = service.store.code_dir(job)
    assert (code / "m.py").read_text().strip() == USER_FILES["m.py"].strip()
    # What the executors are given: references into the store, loaded there (a built-in
    # loss by its name); nothing of the user's code was imported here.
    service.scheduler.take_inbox(0.0)
    user = service.scheduler.records[job].work.user
    assert user is not None and service.scheduler.records[job].work.train is None
    assert (user.model_fn, user.data_fn) == (f"{code / 'm.py'}:f", f"{code / 'm.py'}:d")
    assert user.loss == (f"{code / 'm.py'}:l" if loss == "m.py:l" else loss)
    loaded = [getattr(m, "__file__", None) for m in list(sys.modules.values())]
    assert str(code / "m.py") not in loaded


def test_a_body_over_the_limit_gets_413(open_api: TestClient) -> None:
    big = {
        "gpus": 1,
        "model": "resnet50",
        "duration_s": 60,
        "files": {"a.py": "x" * MAX_BODY_BYTES},
    }
    answer = open_api.post("/api/jobs", json=big)
    assert answer.status_code == 413 and "body" in answer.json()["detail"]


def test_unknown_job_is_404_and_an_ended_one_cannot_be_cancelled(open_api: TestClient) -> None:
    assert open_api.get("/api/jobs/job-99").status_code == 404
    assert open_api.post("/api/jobs/job-99/cancel").status_code == 404


def test_tokens_fix_the_user_and_only_the_owner_or_an_admin_cancels(tmp_path: Path) -> None:
    tokens_file = tmp_path / "tokens"
    tokens_file.write_text(f"# who may call\n{ADMIN}\n{ALICE} alice\n{BOB} bob\n")
    api = TestClient(create_app(_service(tmp_path, read_tokens(tokens_file))))
    body = {"gpus": 1, "model": "resnet50", "duration_s": 60, "user": "mallory"}
    assert api.post("/api/jobs", json=body).status_code == 401
    assert api.get("/api/jobs", headers={"Authorization": "Bearer wrong"}).status_code == 401
    as_alice = {"Authorization": f"Bearer {ALICE}"}
    record = api.post("/api/jobs", json=body, headers=as_alice).json()
    assert record["user"] == "alice"  # the token's user, whatever the body says
    job = record["id"]
    refused = api.post(f"/api/jobs/{job}/cancel", headers={"Authorization": f"Bearer {BOB}"})
    assert refused.status_code == 403 and "alice" in refused.json()["detail"]
    by_admin = api.post(f"/api/jobs/{job}/cancel", headers={"Authorization": f"Bearer {ADMIN}"})
    assert by_admin.status_code == 200
    events = api.get(f"/api/jobs/{job}", headers=as_alice).json()["events"]
    assert [(e["kind"], e["detail"]) for e in events][-1] == ("cancel_requested", "admin")


def test_a_token_file_must_hold_long_tokens(tmp_path: Path) -> None:
    from unstall.errors import UnstallError

    path = tmp_path / "tokens"
    path.write_text("short alice\n")
    with pytest.raises(UnstallError, match=r"tokens:1: .*16 characters"):
        read_tokens(path)


def test_a_host_other_than_loopback_needs_tokens() -> None:
    from unstall.errors import ConfigError
    from unstall.service.serve import check_exposure

    check_exposure("127.0.0.1", None)
    check_exposure("0.0.0.0", {ADMIN: Caller(user="admin", admin=True)})
    with pytest.raises(ConfigError, match="token-file"):
        check_exposure("0.0.0.0", None)


def test_the_cluster_lists_nodes_and_free_gpus(open_api: TestClient) -> None:
    cluster = open_api.get("/api/cluster").json()
    assert cluster["total_gpus"] == 4 and cluster["policy"] == "fifo"
    assert [len(n["jobs"]) for n in cluster["nodes"]] == [2, 2]


def test_openapi_describes_the_job_spec(open_api: TestClient) -> None:
    schema = open_api.get("/openapi.json").json()
    assert "/api/jobs" in schema["paths"] and "JobSpec" in schema["components"]["schemas"]


def test_the_client_waits_until_the_executors_are_up(tmp_path: Path) -> None:
    from service_helpers import serving
    from unstall.service import Client

    service = unstarted_service(tmp_path / "store")
    with serving(service) as url:
        client = Client(url)
        with pytest.raises(TimeoutError, match=r"not up after 0\.3 s"):
            client.wait_ready(timeout_s=0.3, poll_s=0.05)
        service.scheduler.ready.set()
        client.wait_ready(timeout_s=5)  # at once
