"""`unstall recommend`: table, verdict, --json/--plot, measured profiles, exit 1 when infeasible."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from unstall.cli.app import app
from unstall.workload.profiles import JobProfile

runner = CliRunner()

IMAGENET = ["--samples", "1281167", "--epochs", "90"]


def _profile(tmp_path: Path) -> Path:
    profile = JobProfile(
        model="resnet50",
        device="v100",
        compute_s=0.11,
        local_batch=32,
        gradient_bytes=102_228_128,
        gradient_tensors=161,
        layers=54,
        measured={"8": 0.125, "4": 0.118},
    )
    return profile.save(tmp_path / "profile.json")


def test_profile_recommendation_with_json_and_config(tmp_path: Path) -> None:
    out = tmp_path / "rec.json"
    args = ["recommend", "--profile", str(_profile(tmp_path)), *IMAGENET, "--budget-hours", "24"]
    result = runner.invoke(app, [*args, "--family", "p3", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    best = data["recommended"]
    assert best["instance"].startswith("p3.") and best["predicted_hours"] <= 24.0
    within = [c for c in data["candidates"] if c["within_budget"]]
    assert best["predicted_cost_usd"] == min(c["predicted_cost_usd"] for c in within)
    assert len(data["candidates"]) == 3 * 16
    sources = {(c["instance"], c["count"]): c["source"] for c in data["candidates"]}
    assert sources[("p3.16xlarge", 1)] == "measured"
    assert sources[("p3.8xlarge", 1)] == "measured"
    assert sources[("p3.8xlarge", 2)] == "modelled"
    assert f"recommended: {best['count']} x {best['instance']}" in result.output
    assert "measured" in result.output
    config = json.loads((tmp_path / "rec.config.json").read_text())["config"]
    assert config["recommend"]["budget_hours"] == 24.0
    assert config["recommend"]["families"] == ["p3"]
    assert config["model"] is None and config["profile"].endswith("profile.json")


def test_an_unreachable_budget_exits_1_and_says_how_close_the_fastest_gets(
    tmp_path: Path,
) -> None:
    out = tmp_path / "rec.json"
    args = ["recommend", "--profile", str(_profile(tmp_path)), *IMAGENET]
    result = runner.invoke(app, [*args, "--budget-hours", "0.01", "--json", str(out)])
    assert result.exit_code == 1
    assert "no configuration meets the 0.01 h budget" in result.output
    data = json.loads(out.read_text())
    assert data["recommended"] is None and data["feasible"] is False
    fastest = data["fastest"]
    assert f"the fastest, {fastest['count']} x {fastest['instance']}" in result.output
    assert f"{fastest['predicted_hours'] / 0.01:.2f} x the budget" in result.output


def test_zoo_model_and_top() -> None:
    args = ["recommend", "--model", "resnet18", *IMAGENET, "--budget-hours", "48"]
    result = runner.invoke(app, [*args, "--top", "4", "--max-instances", "2"])
    assert result.exit_code == 0, result.output
    assert "resnet18: zoo estimate from FLOPs (fp32; GPU speeds measured for resnet18)" in (
        result.output
    )
    assert "4 of 30 configurations" in result.output
    rows = [line.split() for line in result.output.splitlines() if " x " in line]
    assert [r[0] for r in rows if r[0].isdigit()] == ["1", "2", "3", "4"]
    assert "recommended:" in result.output


def test_plot_of_the_front(tmp_path: Path) -> None:
    plot = tmp_path / "front.png"
    args = ["recommend", "--profile", str(_profile(tmp_path)), *IMAGENET, "--budget-hours", "9"]
    result = runner.invoke(app, [*args, "--plot", str(plot), "--quiet"])
    assert result.exit_code == 0, result.output
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 10_000
    assert "wrote" in result.output and "front.png" in result.output


def test_profile_or_model_exactly_one(tmp_path: Path) -> None:
    base = ["recommend", *IMAGENET, "--budget-hours", "24"]
    neither = runner.invoke(app, base)
    assert neither.exit_code == 2 and "exactly one" in neither.output
    both = runner.invoke(app, [*base, "--model", "vgg16", "--profile", str(_profile(tmp_path))])
    assert both.exit_code == 2 and "exactly one" in both.output


def test_bad_catalog_names_file_line_and_field(tmp_path: Path) -> None:
    catalog = tmp_path / "cat.csv"
    catalog.write_text(
        "instance,gpus,gpu,gpu_memory_gb,gpu_link,network_gbps,usd_per_hour,date,source\n"
        "x.8,8,v100,16,nvlink2,25,free,2026-11,me\n",
        encoding="utf-8",
    )
    args = ["recommend", "--profile", str(_profile(tmp_path)), *IMAGENET, "--budget-hours", "9"]
    result = runner.invoke(app, [*args, "--catalog", str(catalog)])
    assert result.exit_code == 1
    assert "cat.csv, line 2, field 'usd_per_hour': must be a number" in " ".join(
        result.output.split()
    )


def test_bad_values_are_named(tmp_path: Path) -> None:
    args = ["recommend", "--profile", str(_profile(tmp_path)), *IMAGENET]
    result = runner.invoke(app, [*args, "--budget-hours", "-3"])
    assert result.exit_code == 2 and "RecommendConfig.budget_hours" in result.output
    result = runner.invoke(app, [*args, "--budget-hours", "3", "--precision", "fp8"])
    assert result.exit_code == 2 and "precision" in result.output
    result = runner.invoke(app, [*args, "--budget-hours", "3", "--network-efficiency", "2"])
    assert result.exit_code == 2 and "network_efficiency" in result.output


def test_epochs_help_and_check_agree_that_0_is_refused(tmp_path: Path) -> None:
    # The help showed [x>=0.0] (typer's inclusive bound) while --epochs 0 was refused.
    shown = " ".join(runner.invoke(app, ["recommend", "--help"]).output.split())
    assert "x>=0" not in shown and "Epochs to train, > 0" in shown
    args = ["recommend", "--profile", str(_profile(tmp_path)), "--samples", "100"]
    for epochs in ("0", "-1"):
        result = runner.invoke(app, [*args, "--epochs", epochs, "--budget-hours", "3"])
        assert result.exit_code == 2, result.output
        assert "TrainingConfig.epochs: must be a number > 0" in result.output
        assert "(option --epochs)" in result.output and result.output.count("error:") == 1


def test_a_job_of_seconds_is_priced_with_the_billing_minimum_and_shown_in_cents() -> None:
    args = ["recommend", "--model", "mlp", "--samples", "1000", "--epochs", "1"]
    result = runner.invoke(
        app, [*args, "--budget-hours", "1", "--top", "3"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.output
    verdict = next(line for line in result.output.splitlines() if line.startswith("recommended"))
    assert "p5" not in verdict.split(";")[0]  # not the largest, fastest: a minute of it is dear
    # a minute of the cheapest instance, shown to three figures: to the cent, a p2.xlarge
    # ($0.015) tied with it and won as the faster
    assert "1 x g4dn.xlarge (1 T4): 231 ms, $0.00877" in verdict


def test_a_fixed_global_batch_is_stated_in_the_header_and_the_json(tmp_path: Path) -> None:
    # The job's own "32 samples per GPU" is where its compute time comes from; with
    # --global-batch each GPU computes a share of the fixed batch instead, and the header says so.
    out = tmp_path / "rec.json"
    args = ["recommend", "--model", "resnet50", *IMAGENET, "--budget-hours", "24", "--quiet"]
    result = runner.invoke(app, [*args, "--global-batch", "256", "--json", str(out)])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "90 epochs at a global batch of 256 (split over each configuration's GPUs)" in text
    assert json.loads(out.read_text())["global_batch"] == 256
    plain = runner.invoke(app, args)
    assert "global batch" not in plain.output
