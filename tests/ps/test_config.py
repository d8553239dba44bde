"""A parameter-server run's config: built once, of names or objects, checked field by field; its
named parts resolved where the run starts; flat keywords routed into its sections."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from unstall import ps
from unstall.errors import ConfigError
from unstall.ps.config import resolve_parts


def test_names_and_objects_are_the_same_config_parts(tmp_path: Path) -> None:
    named = resolve_parts(
        ps.FitConfig(strategy="psld", scenario="bandwidth", optimizer="adam", servers=3)
    )
    assert named.strategy is ps.STRATEGIES["psld"]
    assert named.scenario == ps.SCENARIOS["bandwidth"]().with_servers(3)
    assert named.optimizer == ps.AdamConfig()
    plain = resolve_parts(ps.FitConfig())
    assert plain.strategy.name == "tf-greedy" and plain.scenario.name == "none"
    assert plain.optimizer == ps.SGDConfig()
    saved = ps.SGDConfig(lr=0.2)
    assert resolve_parts(ps.FitConfig(), resume_optimizer=saved).optimizer is saved
    path = tmp_path / "mine.toml"
    path.write_text('name = "mine"\nservers = 2\n')
    config = ps.FitConfig(scenario=str(path))  # a file's name is checked, read at the start
    assert resolve_parts(config).scenario.servers == 2


def test_flat_keywords_go_into_the_sections() -> None:
    config = ps.FitConfig.of(
        "fit", workers=3, strategy="mxnet", checkpoint_every=5, address="ray://h:10001"
    )
    assert config.workers == 3 and config.strategy == "mxnet"
    assert config.recovery == ps.RecoveryConfig(checkpoint_every=5)
    assert config.runtime.address == "ray://h:10001"
    with pytest.raises(TypeError, match="fit\\(\\) got an unexpected keyword argument 'wrokers'"):
        ps.FitConfig.of("fit", wrokers=3)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"strategy": "hash"}, "FitConfig.strategy: unknown strategy 'hash'"),
        ({"scenario": "congested"}, "FitConfig.scenario: 'congested' is neither a preset"),
        ({"optimizer": "adagrad"}, "FitConfig.optimizer: unknown optimizer 'adagrad'"),
        ({"workers": "2"}, "FitConfig.workers: must be an integer, got str '2'"),
        ({"iterations": 0}, "FitConfig.iterations: must be >= 1, got 0"),
        ({"recovery": {"max_recoveries": 1}}, "FitConfig.recovery: must be a ps.RecoveryConfig"),
    ],
)
def test_a_bad_field_is_one_line_naming_it(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        ps.FitConfig(**fields)  # type: ignore[arg-type]


def test_sections_check_their_fields() -> None:
    with pytest.raises(ConfigError, match=r"RecoveryConfig\.snapshot_every: must be >= 1"):
        ps.RecoveryConfig(snapshot_every=0)
    with pytest.raises(ConfigError, match=r"RuntimeConfig\.timeout_s: must be > 0"):
        ps.RuntimeConfig(timeout_s=0.0)
    assert ps.RuntimeConfig(piece_mb=1.5).piece_bytes == 1_500_000


def test_fit_takes_a_config_or_its_fields_not_both() -> None:
    config = ps.FitConfig(workers=1)

    def model() -> object:
        raise AssertionError("not built: the arguments fail first")

    with pytest.raises(ConfigError, match=r"fit\.config: given with workers: put them in"):
        ps.fit(model, "synthetic", config, workers=2)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"fit\.config: must be a ps\.FitConfig or None"):
        ps.fit(model, "synthetic", dataclasses.asdict(config))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"fit\.workers: must be an integer"):
        ps.fit(model, "synthetic", workers="2")  # type: ignore[arg-type]


def test_predict_iter_s_takes_names() -> None:
    by_name = ps.predict_iter_s("mlp", strategy="mxnet", scenario="bandwidth", iterations=4)
    by_object = ps.predict_iter_s(
        ps.resolve_case(ps.PSRequest(), ps.SCENARIOS["bandwidth"]()).model,
        strategy=ps.STRATEGIES["mxnet"],
        scenario=ps.SCENARIOS["bandwidth"](),
        iterations=4,
    )
    assert by_name == pytest.approx(by_object)


def test_a_grid_shares_one_config() -> None:
    request = ps.PSRequest(workers=3, spares=1, iterations=4, optimizer="adam")
    config = ps.bench_config(request)
    assert (config.workers, config.spares, config.iterations) == (3, 1, 4)
    assert config.optimizer == ps.AdamConfig()
    cases, strategies = ps.resolve_bench(request, ["mxnet"], ["none"])
    with pytest.raises(ConfigError, match=r"compare_strategies\.config: given with workers"):
        ps.compare_strategies(cases, strategies, config, workers=2)
