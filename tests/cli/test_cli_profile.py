"""`unstall profile`: data, run (a real 2-worker run of a tiny model), errors, and fit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from unstall.cli.app import app
from unstall.workload.profiles import JobProfile

runner = CliRunner()


def test_data_writes_png_images(tmp_path: Path) -> None:
    result = runner.invoke(app, ["profile", "data", str(tmp_path), "--count", "6"])
    assert result.exit_code == 0, result.output
    assert len(list(tmp_path.glob("*.png"))) == 6


def test_bad_input_is_one_clear_error(tmp_path: Path) -> None:
    # exit 2 for usage (unknown names, bad values), 1 for data that cannot be used
    cases = [
        (["--model", "nosuch"], "unknown model", 2),
        (["--model", "mlp", "--network", "fast"], "profile.network", 2),
        (["--model", "mlp", "--data", str(tmp_path)], "profile.data", 2),
        (["--model", "resnet18", "--data", str(tmp_path / "none")], "no such directory", 1),
        (["--model", "mlp", "--loss", "l1"], "'l1' is neither a loss", 2),
        (["--model", f"{tmp_path / 'none.py'}:model"], "model function file", 2),
        (["--model", "mlp", "--profile-device", "k80"], "a CPU run is labelled cpu", 2),
        (["--model", "gpt5"], "known: alexnet, bert, cifar10", 2),
    ]
    for args, message, code in cases:
        result = runner.invoke(app, ["profile", "run", *args])
        assert result.exit_code == code, (args, result.output)
        assert message in result.output, (args, result.output)
        assert result.output.count("error:") == 1 and "Traceback" not in result.output


USER_CODE = """
import torch
from torch import nn


def model():
    return nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 3))


def data(rank, world_size):
    for _ in range(4):
        yield torch.randn(6, 10), torch.randint(0, 3, (6,))
"""


def test_run_profiles_a_model_and_data_from_a_users_file(tmp_path: Path) -> None:
    code = tmp_path / "net.py"
    code.write_text(USER_CODE, encoding="utf-8")
    out = tmp_path / "r.json"
    args = ["profile", "run", "--model", f"{code}:model", "--data", f"{code}:data"]
    args += ["--loss", "cross_entropy", "--workers", "2", "--iterations", "1", "--warmup", "1"]
    args += ["--repeats", "1", "--json", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert f"profiling {code}:model: 2 workers on 1 host(s)" in result.output
    # Read across the console's wrapping (a long temporary path moves the line breaks).
    assert "runs compute, warm, cached, local" in " ".join(result.output.split())
    report = json.loads(out.read_text())
    assert report["model"] == f"{code}:model" and report["batch"] == 6
    assert report["job_profile"]["gradient_bytes"] == 4 * (10 * 16 + 16 + 16 * 3 + 3)
    config = json.loads((tmp_path / "r.config.json").read_text())["config"]
    assert (config["data_dir"], config["data"], config["loss"]) == (
        None,
        f"{code}:data",
        "cross_entropy",
    )
    assert config["batch"] == 6  # the data function's batch, not --batch's default
    # --batch cannot set the batch a data function yields: refused, not silently ignored.
    refused = runner.invoke(app, [*args, "--batch", "32"])
    assert refused.exit_code == 2 and refused.output.count("error:") == 1, refused.output
    assert "profile.batch: your data function yields its batches" in refused.output
    assert "(option --batch)" in refused.output


BAD_LOSS = """
import torch


def loss_crash(outputs, targets):
    return outputs.sum() / undefined_name
"""


def test_a_failing_loss_on_two_workers_reports_the_users_error_not_the_peers(
    tmp_path: Path,
) -> None:
    # Rank 0 fails in the user's loss; rank 1 then fails in gloo ("Connection closed by peer"):
    # the user's error is the one to report, whichever worker exits first.
    (tmp_path / "psm.py").write_text(USER_CODE, encoding="utf-8")
    (tmp_path / "psbad.py").write_text(BAD_LOSS, encoding="utf-8")
    model, bad = tmp_path / "psm.py", tmp_path / "psbad.py"
    args = ["profile", "run", "--model", f"{model}:model", "--data", f"{model}:data"]
    args += ["--loss", f"{bad}:loss_crash"]
    args += ["--iterations", "1", "--warmup", "0", "--repeats", "1", "--quiet"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert result.output.count("error:") == 1 and "Traceback" not in result.output
    assert "loss function loss_crash (" in result.output and "psbad.py:5) failed" in result.output
    assert "NameError" in result.output
    assert "gloo" not in result.output and "Connection closed" not in result.output


def test_run_prints_the_breakdown_and_writes_report_profile_trace(tmp_path: Path) -> None:
    out, prof, trace = tmp_path / "r.json", tmp_path / "p.json", tmp_path / "t.json"
    args = ["profile", "run", "--model", "mlp", "--workers", "2", "--network", "1,2"]
    args += ["--iterations", "2", "--warmup", "1", "--repeats", "1", "--batch", "2"]
    args += ["--json", str(out), "--profile-out", str(prof), "--trace", str(trace)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    for text in ("interconnect_stall_s", "network_stall_s", "phase timers", "emulated link"):
        assert text in result.output
    report = json.loads(out.read_text())
    for key in ("compute_s", "fetch_stall_s", "prep_stall_s", "interconnect_stall_s"):
        assert report[key] >= 0 and key in report["fractions"]
    # mlp's 4.2 M gradients over a 1 Gbit/s link: ~34 ms of bandwidth plus 2 ms per bucket.
    assert report["emulated_delay_s"] > 0.03
    assert JobProfile.from_json(prof).measured.keys() == {"1", "2", "11"}
    assert any(e["ph"] == "X" for e in json.loads(trace.read_text())["traceEvents"])


def test_fit_from_saved_points_prints_every_candidate_and_the_pick(tmp_path: Path) -> None:
    # Points of a known no-overlap law (9 ms a bucket + 8 s/GB) over three zoo models: nothing
    # is measured, every variant is read from --points.
    points = []
    variants = {"mlp:depth=2": (3, 1), "mlp:depth=8": (28, 2), "resnet:depth=18": (47, 3)}
    variants |= {"resnet:depth=34": (87, 5), "vgg:depth=11": (531, 5), "mobilenet_v2": (14, 2)}
    for variant, (megabytes, buckets) in variants.items():
        sizes = [megabytes * 1_000_000 // buckets] * buckets
        stall = 9e-3 * buckets + 8e-9 * sum(sizes)
        points.append(
            {"variant": variant, "layers": 2 * buckets + 1, "gradient_tensors": 3 * buckets + 2}
            | {"gradient_bytes": sum(sizes), "bucket_bytes": sizes, "backward_s": 0.02}
            | {"interconnect_stall_s": stall / 4, "network_stall_s": 3 * stall / 4}
        )
    (tmp_path / "pts.json").write_text(json.dumps(points))
    out = tmp_path / "fit.json"
    args = ["profile", "fit", "--points", str(tmp_path / "pts.json"), "--json", str(out)]
    for variant in list(variants)[:-1]:
        args += ["--variant", variant]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    for text in ("ddp-buckets-no-overlap *", "leave-one-model-out", "regression ms"):
        assert text in result.output
    assert "picked ddp-buckets-no-overlap: leave-one-model-out" in result.output
    assert "mobilenet_v2: predicted" in result.output and "(+0.0%)" in result.output
    fit = json.loads(out.read_text())
    assert fit["stall"] == "comm" and fit["selected"] == "ddp-buckets-no-overlap"
    names = [c["name"] for c in fit["candidates"]]
    assert names == ["ddp-buckets", "ddp-buckets-no-overlap", "regression"]
    chosen = fit["candidates"][1]
    assert chosen["model"]["per_byte_s"] == pytest.approx(8e-9, rel=1e-3)
    assert chosen["cross_validation"]["groups"] == "model"
    assert set(chosen["cross_validation"]["errors"]) == set(list(variants)[:-1])
    bad = runner.invoke(
        app, ["profile", "fit", "--points", str(tmp_path / "pts.json"), "--cv", "x"]
    )
    assert bad.exit_code == 2 and "--cv" in bad.output


@pytest.mark.slow
def test_fit_measures_the_sweep_and_predicts_the_held_out_model(tmp_path: Path) -> None:
    out = tmp_path / "fit.json"
    args = ["profile", "fit", "--held-out", "mlp:depth=6,width=256", "--iterations", "2"]
    args += ["--repeats", "1", "--warmup", "1", "--network", "0.1,1", "--json", str(out)]
    args += ["--stall", "network"]
    for depth in (1, 2, 4, 8):
        args += ["--variant", f"mlp:depth={depth},width=256"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    fit = json.loads(out.read_text())
    assert fit["stall"] == "network" and len(fit["points"]) == 4
    # DDP's buckets: the first closes once it holds 1 MiB, so only depth 8 has a second one.
    assert [len(p["bucket_bytes"]) for p in fit["points"]] == [1, 1, 1, 2]
    assert all(sum(p["bucket_bytes"]) == p["gradient_bytes"] for p in fit["points"])
    # Fit quality on two-iteration runs is at the mercy of the machine's load (a loaded machine
    # can push R^2 below 0): the laws themselves are tested on known points in tests/profile.
    chosen = next(c for c in fit["candidates"] if c["name"] == fit["selected"])
    assert chosen["quality"]["held_out_predicted_s"] >= 0
    assert set(chosen["cross_validation"]["errors"]) == {p["variant"] for p in fit["points"]}
    # One zoo model only: the folds leave one variant out each.
    assert fit["reason"].startswith("leave-one-variant-out")
    assert "picked" in result.output and "mlp:depth=6,width=256: predicted" in result.output


@pytest.mark.slow
def test_run_under_torchrun_joins_the_launched_workers(tmp_path: Path) -> None:
    # torchrun starts the 2 workers; the command joins them (env://) instead of spawning, and
    # only rank 0 prints and writes the report.
    import os
    import subprocess
    import sys

    out = tmp_path / "r.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += ["--nproc-per-node", "2", "-m", "unstall", "profile", "run", "--model", "mlp"]
    command += ["--network", "1,2", "--iterations", "2", "--warmup", "1", "--repeats", "1"]
    command += ["--batch", "2", "--json", str(out)]
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo"}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.count("stalls of mlp") == 1, done.stdout
    assert "2 workers on 1 host(s), cpu (gloo)" in done.stdout
    report = json.loads(out.read_text())
    assert report["workers"] == 2 and report["backend"] == "gloo"
    assert report["emulated_delay_s"] > 0.03


CLASS_MODEL = """
from torch import nn


def model():
    return nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 2)
    )
"""


def test_a_class_folder_set_profiles_through_a_dataloader_and_the_cpu_profile_converts(
    tmp_path: Path,
) -> None:
    from PIL import Image

    for label in ("ant", "bee"):
        (tmp_path / "set" / label).mkdir(parents=True)
        for i in range(3):
            Image.new("RGB", (40 + i, 36)).save(tmp_path / "set" / label / f"{i}.jpg")
    code = tmp_path / "conv.py"
    code.write_text(CLASS_MODEL, encoding="utf-8")
    prof, trace = tmp_path / "p.json", tmp_path / "t.json"
    args = ["profile", "run", "--model", f"{code}:model", "--data", str(tmp_path / "set")]
    args += ["--data-workers", "1", "--workers", "1", "--iterations", "2", "--warmup", "1"]
    args += ["--repeats", "1", "--batch", "2", "--name", "conv", "--quiet"]
    args += ["--profile-out", str(prof), "--trace", str(trace)]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "profiling" not in result.output  # --quiet: no header
    profile = JobProfile.from_json(prof)
    assert (profile.model, profile.device, profile.local_batch) == ("conv", "cpu", 2)
    assert profile.device_name and profile.device_tflops and profile.data_s is not None
    assert profile.gradient_bytes == profile.parameter_bytes == 4 * (4 * 3 * 9 + 4 + 4 * 2 + 2)
    events = json.loads(trace.read_text())["traceEvents"]
    runs = {e["name"] for e in events if e["ph"] == "X" and " round " in e["name"]}
    # One worker: the one-worker runs alone, no DDP run, so no interconnect stall.
    assert runs == {"compute round 0", "cold round 0", "warm round 0", "cached round 0"}
    assert profile.measured.keys() == {"1"}
    refused = runner.invoke(app, ["sim", "run", "--policy", "fifo", "--job-profile", str(prof)])
    assert refused.exit_code == 2 and refused.output.count("error:") == 1
    assert "measured on a CPU" in refused.output and "unstall profile convert" in refused.output
    out = tmp_path / "v100.json"
    converted = runner.invoke(
        app, ["profile", "convert", str(prof), "--gpu", "v100", "--out", str(out)]
    )
    assert converted.exit_code == 0, converted.output
    factor = profile.device_tflops / 15.7
    assert f"x {factor:.4g}" in converted.output
    gpu = JobProfile.from_json(out)
    assert gpu.device == "v100" and gpu.compute_s == pytest.approx(profile.compute_s * factor)


def test_every_option_of_profile_data_has_help_text() -> None:
    import typer

    profile_group = typer.main.get_command(app).commands["profile"]  # type: ignore[attr-defined]
    command = profile_group.commands["data"]
    missing = [p.name for p in command.params if not getattr(p, "help", None)]
    assert missing == [], f"options without help: {missing}"
    shown = runner.invoke(app, ["profile", "data", "--help"]).output
    assert "each image's label" in shown and "Seed of the pixels" in shown


RANK_ONE_FAILS = """
import torch
import torch.distributed as dist
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(10, 3)

    def forward(self, x):
        if dist.is_initialized() and dist.get_rank() == 1:
            raise RuntimeError("worker one gave up")
        return self.layer(x)


def model():
    return Net()


def data(rank, world_size):
    for _ in range(4):
        yield torch.randn(6, 10), torch.randint(0, 3, (6,))
"""


def test_a_worker_failing_alone_prints_only_the_one_error_line(tmp_path: Path) -> None:
    # Rank 1 fails in its first DDP step; rank 0 is stopped. torch's spawn join would print its
    # own "Terminating process N via signal SIGTERM" warning on stderr before the error line.
    import subprocess
    import sys

    code = tmp_path / "rank1.py"
    code.write_text(RANK_ONE_FAILS, encoding="utf-8")
    command = [sys.executable, "-m", "unstall", "profile", "run", "--model", f"{code}:model"]
    command += ["--data", f"{code}:data", "--workers", "2", "--iterations", "1", "--warmup", "0"]
    command += ["--repeats", "1", "--quiet"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("error: profiling workers failed: ") and "SIGTERM" not in lines[0]
    assert "RuntimeError: worker one gave up" in lines[0], lines[0]
    # The user's exception, named where it was raised: the file and line, the function.
    line = RANK_ONE_FAILS.splitlines().index('            raise RuntimeError("worker one gave up")')
    assert f"at {code}:{line + 1} in Net.forward on a batch of inputs float32 (6, 10)" in lines[0]
    assert done.stdout == ""


SIBLING = """
from torch import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(10, 3)

    def forward(self, x):
        return self.layer(x)
"""

IMPORTS_SIBLING = """
import torch
from profsibling_blocks import Block


def model():
    return Block()


def data(rank, world_size):
    for _ in range(4):
        yield torch.randn(6, 10), torch.randint(0, 3, (6,))
"""


def test_a_users_file_importing_its_sibling_module_profiles_on_two_workers(
    tmp_path: Path,
) -> None:
    # Block travels by reference, as "profsibling_blocks.Block": the workers find that module
    # in the user's folder, as the loader did in this process while the file ran.
    (tmp_path / "profsibling_blocks.py").write_text(SIBLING, encoding="utf-8")
    code = tmp_path / "profsibling_main.py"
    code.write_text(IMPORTS_SIBLING, encoding="utf-8")
    args = ["profile", "run", "--model", f"{code}:model", "--data", f"{code}:data"]
    args += ["--workers", "2", "--iterations", "1", "--warmup", "0", "--repeats", "1", "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "stalls of" in result.output and "2 tensors, 1 weight layers" in result.output


LOADER_DATA = """
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Rows(Dataset):
    def __len__(self):
        return 24

    def __getitem__(self, i):
        return torch.full((10,), float(i)), i % 3


def model():
    return nn.Sequential(nn.Linear(10, 3))


def data(rank, world_size):
    return DataLoader(Rows(), batch_size=6, num_workers=1)
"""


def test_a_data_function_with_a_dataloader_of_its_own_dataset_class_profiles(
    tmp_path: Path,
) -> None:
    # The loader's worker process starts as in the user's own training (fork on Linux): with
    # the spawned worker's default, spawn, the Dataset class from the user's file (sent by
    # value, importable nowhere) cannot be pickled to it.
    code = tmp_path / "loaderdata.py"
    code.write_text(LOADER_DATA, encoding="utf-8")
    args = ["profile", "run", "--model", f"{code}:model", "--data", f"{code}:data"]
    args += ["--workers", "1", "--iterations", "5", "--warmup", "1", "--repeats", "1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    # The console wraps long lines where the temporary path's length puts the break: compare
    # word by word.
    assert "6 samples per worker" in " ".join(result.output.split())
    # The header: one worker, no DDP run; the warm run calls the function again for a new epoch
    # (6 iterations of a loader of 4 batches).
    assert f"profiling {code}:model: 1 worker on 1 host(s), cpu (gloo); runs compute, warm," in (
        result.output
    )
    assert "called again when it ends (a new epoch" in " ".join(result.output.split())


def test_fit_refuses_batch_with_a_data_function_before_measuring(tmp_path: Path) -> None:
    code = tmp_path / "fitnet.py"
    code.write_text(USER_CODE, encoding="utf-8")
    args = ["profile", "fit", "--variant", f"{code}:model", "--held-out", f"{code}:model"]
    args += ["--data", f"{code}:data", "--batch", "4"]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.output.count("error:") == 1 and "Traceback" not in result.output
    assert "profile.batch: your data function yields its batches" in result.output
    assert "(option --batch)" in result.output


def test_network_text_to_a_link() -> None:
    from unstall.cli.profile import parse_network
    from unstall.errors import ConfigError
    from unstall.net.link import Link

    assert parse_network(None) is None
    link = parse_network("1,0.5")
    assert link == Link(bandwidth_gbps=1.0, latency_us=500.0)
    assert link is not None and link.latency_ms == 0.5
    assert parse_network("2") == Link(bandwidth_gbps=2.0)
    for bad, why in (
        ("x,1", "GBPS,LATENCY_MS must be numbers"),
        ("1,2,3", "want GBPS,LATENCY_MS"),
        ("0,1", "bandwidth must be > 0"),
        ("1,-1", "latency must be >= 0"),
    ):
        with pytest.raises(ConfigError, match=rf"profile\.network: {why}"):
            parse_network(bad)
