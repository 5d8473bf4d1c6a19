"""Advantage estimators and policy losses as plugin kinds: registration, declarations and the lookups."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict

from astuner.algorithms import (
    PolicyLossSettings,
    advantage_estimator,
    algorithm_counterpart,
    algorithm_name,
    algorithm_names,
    policy_loss,
    policy_loss_settings,
)
from astuner.config import load_config
from astuner.config_sections import TrainerCommonConfig
from astuner.core import advantages
from astuner.errors import ConfigError, PluginError
from astuner.hookspecs import hookimpl
from astuner.plugins import Plugins


def _trainer(*overrides: str) -> TrainerCommonConfig:
    return load_config(None, [f"trainer_common.{o}" for o in overrides], environ={}).trainer_common


def _loss(logprobs, old_logprobs, advantages, mask, settings):
    return advantages, mask


class LossArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    beta: float = 1.0


class Extra:
    """A plugin adding one estimator and two losses, one with settings of its own."""

    @hookimpl
    def register_advantage_estimators(self, register):
        register("mine", lambda: advantages.dr_grpo, aliases=("my_estimator",), counterparts={"verl": "x"})

    @hookimpl
    def register_policy_losses(self, register):
        register("plain", lambda: _loss, defaults={"clip_ratio_high": 0.5})
        register("tuned", lambda: _loss, settings=LossArgs)


@pytest.fixture
def plugins() -> Plugins:
    loaded = Plugins(load_entry_points=False)
    loaded.add(Extra(), name="extra")
    return loaded


def test_the_kernel_registers_its_estimators_and_losses_through_the_hooks() -> None:
    plugins = Plugins(load_entry_points=False)
    assert set(plugins.registry("advantage_estimator")) == {
        "grpo",
        "dr_grpo",
        "rloo",
        "reinforce_pp",
        "reinforce_pp_baseline",
    }
    assert set(plugins.registry("policy_loss")) == {"ppo_clip", "dapo", "gspo", "cispo"}
    assert algorithm_names(plugins, "policy_loss") == ["cispo", "dapo", "gspo", "ppo", "ppo_clip", "vanilla"]
    info = next(i for i in plugins.infos() if i.name == "algorithms")
    assert "advantage_estimator:grpo" in info.provides and "policy_loss:gspo" in info.provides
    assert info.hooks == ["register_advantage_estimators", "register_policy_losses"]


def test_registering_loads_neither_numpy_nor_torch() -> None:
    """Listing plugins must stay cheap: the factories import the math."""
    probe = (
        "import sys; from astuner.plugins import Plugins; "
        "Plugins(load_entry_points=False).registry('policy_loss'); "
        "print(sorted({'numpy', 'torch'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_aliases_resolve_to_the_registered_algorithm(plugins: Plugins) -> None:
    assert advantage_estimator(plugins, "multi_step_grpo") is advantages.grpo
    assert advantage_estimator(plugins, "rloo") is advantages.rloo
    assert advantage_estimator(plugins, "my_estimator") is advantages.dr_grpo
    assert policy_loss_settings(plugins, _trainer("algorithm.policy_loss=vanilla")).name == "ppo_clip"
    assert "my_estimator" in algorithm_names(plugins, "advantage_estimator")
    assert algorithm_name(plugins, "policy_loss", "ppo") == algorithm_name(plugins, "policy_loss", "ppo_clip")
    assert algorithm_name(plugins, "advantage_estimator", "multi_step_grpo") == "grpo"


def test_unknown_names_are_config_errors_naming_the_key_and_the_installed_ones(plugins: Plugins) -> None:
    with pytest.raises(
        ConfigError,
        match=r"trainer_common\.algorithm\.adv_estimator: 'gpro'.*Did you mean 'grpo'.*multi_step_grpo",
    ):
        advantage_estimator(plugins, "gpro")
    with pytest.raises(
        ConfigError, match=r"trainer_common\.algorithm\.policy_loss: 'gpso'.*cispo, dapo, gspo"
    ):
        policy_loss_settings(plugins, _trainer("algorithm.policy_loss=gpso"))
    with pytest.raises(ValueError, match="not an algorithm kind"):
        algorithm_names(plugins, "judge")


def test_a_losss_defaults_fill_what_the_user_left_unset_and_the_users_values_win(plugins: Plugins) -> None:
    gspo = policy_loss_settings(plugins, _trainer("algorithm.policy_loss=gspo"))
    assert gspo.settings == PolicyLossSettings(clip_low=3e-4, clip_high=4e-4)
    assert gspo.loss_agg_mode == "seq-mean-token-mean"
    dapo = policy_loss_settings(plugins, _trainer("algorithm.policy_loss=dapo", "clip_ratio_low=0.1"))
    assert (dapo.settings.clip_low, dapo.settings.clip_high, dapo.loss_agg_mode) == (0.1, 0.28, "token-mean")
    cispo = policy_loss_settings(
        plugins, _trainer("algorithm.policy_loss=cispo", "loss_agg_mode=seq-mean-token-sum")
    )
    assert (cispo.settings.clip_low, cispo.settings.clip_high) == (1.0, 0.28)
    assert cispo.loss_agg_mode == "seq-mean-token-sum"
    # a loss that declares only some defaults: the rest are PPO's
    plain = policy_loss_settings(plugins, _trainer("algorithm.policy_loss=plain"))
    assert (plain.settings.clip_low, plain.settings.clip_high, plain.loss_agg_mode) == (
        0.2,
        0.5,
        "token-mean",
    )
    chosen = policy_loss(plugins, _trainer("algorithm.policy_loss=plain"))
    assert chosen.fn is _loss and chosen.name == "plain"


def test_policy_loss_args_are_checked_against_the_losss_settings(plugins: Plugins) -> None:
    tuned = policy_loss(plugins, _trainer("algorithm.policy_loss=tuned", "algorithm.policy_loss_args.beta=2"))
    assert tuned.settings.options == LossArgs(beta=2.0)
    assert policy_loss(plugins, _trainer("algorithm.policy_loss=tuned")).settings.options == LossArgs()
    with pytest.raises(
        ConfigError,
        match=r"trainer_common\.algorithm\.policy_loss_args\.gamma: policy loss 'tuned' has no such"
        r" setting\. .*one it takes: beta\.$",
    ):
        policy_loss(plugins, _trainer("algorithm.policy_loss=tuned", "algorithm.policy_loss_args.gamma=2"))
    with pytest.raises(
        ConfigError, match=r"trainer_common\.algorithm\.policy_loss_args\.beta: Input should be"
    ):
        policy_loss(plugins, _trainer("algorithm.policy_loss=tuned", "algorithm.policy_loss_args.beta=high"))
    with pytest.raises(ConfigError, match=r"policy_loss_args: policy loss 'ppo_clip' takes no settings"):
        policy_loss_settings(plugins, _trainer("algorithm.policy_loss_args.beta=2"))


def test_counterparts_are_found_through_aliases_and_refused_naming_key_and_backbone(plugins: Plugins) -> None:
    assert algorithm_counterpart(plugins, "advantage_estimator", "multi_step_grpo", "verl") == ("grpo", True)
    assert algorithm_counterpart(plugins, "advantage_estimator", "grpo", "trinity") == "multi_step_grpo"
    assert algorithm_counterpart(plugins, "policy_loss", "gspo", "verl") == "gspo"
    assert algorithm_counterpart(plugins, "policy_loss", "ppo", "trinity") == "ppo"
    with pytest.raises(
        ConfigError,
        match=r"trainer_common\.algorithm\.adv_estimator 'reinforce_pp': backbone trinity has no "
        r"counterpart.*"
        r"use one of: grpo, multi_step_grpo, rloo;",
    ):
        algorithm_counterpart(plugins, "advantage_estimator", "reinforce_pp", "trinity")
    with pytest.raises(
        ConfigError, match=r"trainer_common\.algorithm\.policy_loss 'plain': backbone verl has no counterpart"
    ):
        algorithm_counterpart(plugins, "policy_loss", "plain", "verl")


@pytest.mark.parametrize(
    ("kind", "declaration", "refused"),
    [
        ("judges", {"counterparts": {"verl": "x"}}, "counterparts means nothing for judge 'x'"),
        ("backbones", {"aliases": ("y",)}, "aliases means nothing for backbone 'x'"),
        ("advantage_estimators", {"defaults": {"clip_ratio_low": 0.1}}, "defaults means nothing for"),
        ("policy_losses", {"reads": ("trainer_common",)}, "reads means nothing for policy_loss 'x'"),
        ("policy_losses", {"defaults": {"clip_low": 0.1}}, "may set only clip_ratio_low.*not clip_low"),
        ("policy_losses", {"defaults": {"clip_ratio_low": -1}}, "clip_ratio_low must be a number >= 0"),
        ("policy_losses", {"defaults": {"loss_agg_mode": "sum"}}, "loss_agg_mode must be one of token-mean"),
        ("policy_losses", {"aliases": "ppo2"}, "must be a list of strings"),
        ("policy_losses", {"aliases": ("a->B",)}, "plain names"),
        ("policy_losses", {"counterparts": {"": "x"}}, "must map backbone names"),
    ],
)
def test_declarations_are_refused_on_kinds_they_mean_nothing_for(
    kind: str, declaration: dict, refused: str
) -> None:
    hook = f"register_{kind}"

    class Wrong:
        pass

    setattr(Wrong, hook, hookimpl(lambda self, register: register("x", object, **declaration)))
    plugins = Plugins(load_entry_points=False)
    plugins.add(Wrong(), name="wrong")
    info = next(i for i in plugins.infos() if i.name == "wrong")
    assert info.status == "hook error"
    assert info.error is not None and re.search(refused, info.error), info.error


def test_an_alias_claimed_twice_is_a_plugin_error() -> None:
    class Twin:
        @hookimpl
        def register_policy_losses(self, register):
            register("ppo2", lambda: _loss, aliases=("vanilla",))

    plugins = Plugins(load_entry_points=False)
    plugins.add(Twin(), name="twin")
    with pytest.raises(
        PluginError, match=r"'vanilla' is claimed by 'ppo_clip'.*alias of 'ppo2' \(plugin 'twin'\)"
    ):
        algorithm_names(plugins, "policy_loss")


THIRD_PARTY = """
from astuner.api import hookimpl


def _halves(scores, group, eps):
    return scores / 2, scores * 0 + 1


def _loss(logprobs, old_logprobs, advantages, mask, settings):
    return -advantages * logprobs, mask * 0


@hookimpl
def register_advantage_estimators(register):
    register("halves", lambda: _halves, counterparts={"trinity": "halves_there"})


@hookimpl
def register_policy_losses(register):
    register("plain_pg", lambda: _loss, aliases=("pg",), defaults={"loss_agg_mode": "seq-mean-token-sum"})
"""


@pytest.fixture
def third_party(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A plugin distribution found through its `astuner` entry point, as `pip install` would leave it."""
    (tmp_path / "algo_plugin").mkdir()
    (tmp_path / "algo_plugin" / "__init__.py").write_text(THIRD_PARTY)
    info = tmp_path / "astuner_algo_plugin-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: astuner-algo-plugin\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent("[astuner]\nalgo = algo_plugin\n"))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("ASTUNER_LOAD_PLUGINS", "algo")
    yield
    sys.modules.pop("algo_plugin", None)


def test_an_installed_plugins_estimator_and_loss_are_found_by_the_lookups(third_party: None) -> None:
    plugins = Plugins()
    halves = advantage_estimator(plugins, "halves")
    assert halves.__module__ == "algo_plugin"
    chosen = policy_loss(plugins, _trainer("algorithm.policy_loss=pg"))
    assert chosen.name == "plain_pg" and chosen.fn.__module__ == "algo_plugin"
    assert chosen.loss_agg_mode == "seq-mean-token-sum" and chosen.settings.clip_high == 0.2
    assert algorithm_counterpart(plugins, "advantage_estimator", "halves", "trinity") == "halves_there"
    assert "pg" in algorithm_names(plugins, "policy_loss")


@pytest.mark.parametrize(
    ("typo", "meant"),
    [("register_policy_loss", "register_policy_losses"), ("register_metric", "register_metrics")],
)
def test_a_misspelled_hook_is_named_with_the_one_meant(typo: str, meant: str) -> None:
    plugins = Plugins(load_entry_points=False)
    plugins.add(type("Typo", (), {typo: hookimpl(lambda self, register: None)})(), name="typo")
    info = next(i for i in plugins.infos() if i.name == "typo")
    assert info.status == "invalid hook"
    assert info.error == f"unknown hook '{typo}' (did you mean '{meant}'?)"
