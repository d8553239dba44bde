"""Option and name errors in the user's words (issue 50 item 5): the option as typed, a "did you
mean" for options, policies, models and clusters, nothing unrelated appended; `sim models` lists
every model name a trace may give, aliases marked."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from unstall.cli.app import app
from unstall.errors import UnknownOptionError
from unstall.sched import make_policy
from unstall.workload.job_specs import known_models

runner = CliRunner()


def error_line(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, result.output
    return lines[0]


@pytest.mark.parametrize(
    ("args", "typed"),
    [
        (["sim", "run", "--policy", "dally", "--policy-option", "wiat_factor=3"], "wiat_factor"),
        (
            [
                "sim",
                "compare",
                "--policies",
                "dally,fifo",
                "--policy-option",
                "dally.wiat_factor=3",
            ],
            "dally.wiat_factor",
        ),
    ],
)
def test_a_misspelt_policy_option_is_named_as_typed_with_a_suggestion(
    args: list[str], typed: str
) -> None:
    line = error_line([*args, "--max-jobs", "5", "-q"])
    assert line == (
        f"error: --policy-option {typed}: 'dally' has no such option (did you mean 'wait_factor'?)"
    )


def test_an_option_like_no_other_lists_the_policys_options_and_nothing_else() -> None:
    line = error_line(["sim", "run", "--policy", "dally", "--policy-option", "zzz=1", "-q"])
    assert line.startswith("error: --policy-option zzz: 'dally' has no such option; its options: ")
    assert "wait_factor" in line
    # The options listed name no command-line option of their own (max_jobs, restore_s).
    assert "(max_jobs: option" not in line and "option --restore-s" not in line
    assert "DallyOptions" not in line


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ["sim", "run", "--policy", "consolidat"],
            "error: --policy: unknown policy 'consolidat' (did you mean 'consolidate'?)",
        ),
        (
            ["sim", "compare", "--policies", "fifo,consolidat"],
            "error: --policies: unknown policy 'consolidat' (did you mean 'consolidate'?)",
        ),
        (["sim", "run", "--policy", "fifo", "--cluster", "smal"], "'smal' (did you mean 'small'?)"),
        (
            ["sim", "run", "--policy", "fifo", "--model-mix", "resnet5=1"],
            "unknown model 'resnet5' (did you mean 'resnet50'?)",
        ),
        (
            ["sim", "models", "--model", "mobilenet_v3"],
            "'mobilenet_v3' (did you mean 'mobilenet_v2'?)",
        ),
    ],
)
def test_misspelt_names_get_a_suggestion(args: list[str], said: str) -> None:
    assert said in error_line([*args, "--max-jobs", "5"] if args[1] != "models" else args)


def test_python_gets_the_suggestion_too() -> None:
    with pytest.raises(UnknownOptionError, match=r"did you mean 'wait_factor'\?") as err:
        make_policy("dally-fixed", wiat_factor=3.0)
    assert "wait_factor" in err.value.known


def test_sim_models_lists_every_name_a_trace_may_give_aliases_marked() -> None:
    result = runner.invoke(app, ["sim", "models"])
    assert result.exit_code == 0, result.output
    first_words = {line.split()[0] for line in result.output.splitlines() if line.split()}
    assert set(known_models()) <= first_words
    aliases = result.output.split("Aliases a trace may name")[1]
    assert "bert         transformer (d_model=768" in aliases
    assert "yolov3       resnet50 (image_size=416)" in aliases
    shown = runner.invoke(app, ["sim", "models", "--model", "cifar10"])
    assert shown.exit_code == 0, shown.output
    assert "cifar10 is an alias of resnet18 (image_size=32, num_classes=10)" in shown.output


def test_every_preset_is_in_the_cluster_help() -> None:
    from unstall.net.topology import TOPOLOGY_PRESETS

    for command in (["sim", "run"], ["sim", "compare"], ["live", "run"]):
        text = " ".join(runner.invoke(app, [*command, "--help"]).output.split())
        assert all(name in text for name in TOPOLOGY_PRESETS), (command, text)
        assert "tiny," in text


@pytest.mark.parametrize(("option", "value"), [("--speedup", "0"), ("--checkpoint-every-s", "-1")])
def test_a_rate_that_must_be_positive_says_so(option: str, value: str) -> None:
    result = runner.invoke(app, ["live", "run", "--policy", "fifo", option, value])
    assert result.exit_code == 2, result.output
    assert f"'{option}': must be > 0, got {value}" in " ".join(result.output.split())
    assert "1e-09" not in result.output and "0.000000001" not in result.output
