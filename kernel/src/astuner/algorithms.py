"""The run's training algorithms, chosen among the plugins' registrations.

Advantage estimators and policy losses are plugin kinds
(`register_advantage_estimators`, `register_policy_losses`): the kernel's
own (grpo, rloo, ...; ppo_clip, dapo, gspo, cispo) register through the same
hooks as a plugin's. Each is chosen by name, or by one of its `aliases`:

- `advantage_estimator(plugins, name)`: the estimator function
  `trainer_common.algorithm.adv_estimator` names.
- `policy_loss(plugins, trainer_common)`: the loss
  `trainer_common.algorithm.policy_loss` names, with its settings resolved
  (`policy_loss_settings` gives them without building the loss).
- `algorithm_counterpart(plugins, kind, name, backbone)`: what a backbone
  whose engine computes the algorithm itself (verl, Trinity-RFT) sets for it.
- `algorithm_names(plugins, kind)`: every name a config may choose, and
  `algorithm_name(plugins, kind, name)` the registered one an alias stands for.

An unknown name, or one without a counterpart on the run's backbone, is a
ConfigError naming the config key. Nothing here imports numpy or torch:
an estimator's or a loss's factory does, when a run builds it.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from astuner.errors import ConfigError, PluginError

if TYPE_CHECKING:
    from astuner.config_sections import TrainerCommonConfig
    from astuner.core.advantages import Estimator
    from astuner.plugins import Plugins, Registration

# kind -> the config key that chooses one
CHOSEN_BY: dict[str, str] = {
    "advantage_estimator": "trainer_common.algorithm.adv_estimator",
    "policy_loss": "trainer_common.algorithm.policy_loss",
}
LOSS_ARGS_KEY = "trainer_common.algorithm.policy_loss_args"

# What `trainer_common.clip_ratio_low`, `clip_ratio_high` and `loss_agg_mode` are when neither the
# user nor the chosen loss's `defaults` set them: PPO's clip range, and a mean over every token.
FALLBACK_DEFAULTS: Mapping[str, Any] = {
    "clip_ratio_low": 0.2,
    "clip_ratio_high": 0.2,
    "loss_agg_mode": "token-mean",
}


@dataclass(frozen=True)
class PolicyLossSettings:
    """What a policy loss is called with besides its tensors.

    `clip_low` and `clip_high` are `trainer_common.clip_ratio_low` and
    `clip_ratio_high` (the loss's `defaults` where unset): a ratio is kept
    within `[1 - clip_low, 1 + clip_high]`, as the loss reads them.
    `options` is `trainer_common.algorithm.policy_loss_args` validated by the
    loss's `settings=` model (None for a loss without one).
    """

    clip_low: float
    clip_high: float
    options: Any = None


# loss(logprobs, old_logprobs, advantages, mask, settings) -> (per_token_loss, clipped), tensors (B, T)
PolicyLoss = Callable[[Any, Any, Any, Any, PolicyLossSettings], tuple[Any, Any]]


@dataclass(frozen=True)
class LossSettings:
    """The chosen policy loss's registered name and resolved settings, without building it.

    `loss_agg_mode` is `trainer_common.loss_agg_mode`, or the loss's default.
    A backbone that translates the loss for its engine reads these: building
    the loss would import torch for nothing.
    """

    name: str
    settings: PolicyLossSettings
    loss_agg_mode: str


@dataclass(frozen=True)
class ChosenLoss(LossSettings):
    """The chosen policy loss: its settings (`LossSettings`) and `fn`, the loss function itself."""

    fn: PolicyLoss


def algorithm_names(plugins: Plugins, kind: str) -> list[str]:
    """Every name the config may choose an algorithm of `kind` by: registered names and aliases, sorted."""
    return sorted({*plugins.registry(_checked_kind(kind)), *_aliases(plugins, kind)})


def algorithm_name(plugins: Plugins, kind: str, name: str) -> str:
    """The registered name `name` stands for (itself, or what it is an alias of); a ConfigError if none."""
    return _registration(plugins, kind, name).name


def advantage_estimator(plugins: Plugins, name: str) -> Estimator:
    """The estimator registered as (or under the alias) `name`, built by its factory.

    A ConfigError naming `trainer_common.algorithm.adv_estimator` and the
    installed names when there is none.
    """
    estimator: Estimator = _registration(plugins, "advantage_estimator", name).factory()
    return estimator


def policy_loss_settings(plugins: Plugins, trainer_common: TrainerCommonConfig) -> LossSettings:
    """The policy loss `trainer_common.algorithm.policy_loss` names, and its settings: the user's values,
    else the loss's declared `defaults`, else `FALLBACK_DEFAULTS`.

    ConfigErrors name `trainer_common.algorithm.policy_loss` for an unknown
    loss and `trainer_common.algorithm.policy_loss_args[.<key>]` for
    settings the loss does not take.
    """
    reg = _registration(plugins, "policy_loss", trainer_common.algorithm.policy_loss)
    defaults = {**FALLBACK_DEFAULTS, **reg.declares.defaults}

    def value(key: str) -> Any:
        given = getattr(trainer_common, key)
        return defaults[key] if given is None else given

    return LossSettings(
        name=reg.name,
        settings=PolicyLossSettings(
            clip_low=float(value("clip_ratio_low")),
            clip_high=float(value("clip_ratio_high")),
            options=_loss_options(reg, trainer_common.algorithm.policy_loss_args),
        ),
        loss_agg_mode=str(value("loss_agg_mode")),
    )


def policy_loss(plugins: Plugins, trainer_common: TrainerCommonConfig) -> ChosenLoss:
    """The chosen policy loss built by its factory, with its settings (`policy_loss_settings`)."""
    chosen = policy_loss_settings(plugins, trainer_common)
    fn: PolicyLoss = plugins.registry("policy_loss")[chosen.name].factory()
    return ChosenLoss(name=chosen.name, settings=chosen.settings, loss_agg_mode=chosen.loss_agg_mode, fn=fn)


def algorithm_counterpart(plugins: Plugins, kind: str, name: str, backbone: str) -> Any:
    """What backbone `backbone` sets for the algorithm `name` of `kind` (its declared `counterparts`).

    A ConfigError naming the config key, the backbone and the names it has a
    counterpart for when this one has none there.
    """
    reg = _registration(plugins, kind, name)
    if backbone in reg.declares.counterparts:
        return reg.declares.counterparts[backbone]
    has = [
        n
        for n in algorithm_names(plugins, kind)
        if backbone in _resolve(plugins, kind, n).declares.counterparts
    ]
    label = kind.replace("_", " ")
    raise ConfigError(
        f"{CHOSEN_BY[kind]} '{name}': backbone {backbone} has no counterpart of this {label}. "
        f"On backbone {backbone} use one of: {', '.join(has) or '(none)'}; or set the engine's own key in "
        f"the {backbone}: block, or train with backbone torch, which runs every {label}."
    )


def _checked_kind(kind: str) -> str:
    if kind not in CHOSEN_BY:
        raise ValueError(f"{kind!r} is not an algorithm kind; kinds: {', '.join(CHOSEN_BY)}")
    return kind


def _aliases(plugins: Plugins, kind: str) -> dict[str, str]:
    """alias -> the registered name it stands for; a PluginError when two registrations claim one name."""
    registry = plugins.registry(_checked_kind(kind))
    aliases: dict[str, str] = {}
    for reg in registry.values():
        for alias in reg.declares.aliases:
            other = registry.get(alias) or registry.get(aliases.get(alias, ""))
            if other is not None and other is not reg:
                raise PluginError(
                    f"The {kind.replace('_', ' ')} name '{alias}' is claimed by '{other.name}' (plugin "
                    f"'{other.plugin}') and as an alias of '{reg.name}' (plugin '{reg.plugin}'). Uninstall "
                    "one of them."
                )
            aliases[alias] = reg.name
    return aliases


def _registration(plugins: Plugins, kind: str, name: str) -> Registration:
    plugins.check_conflicts()
    return _resolve(plugins, kind, name)


def _resolve(plugins: Plugins, kind: str, name: str) -> Registration:
    """The registration `name` stands for, or a ConfigError naming the key and the installed names."""
    registry = plugins.registry(_checked_kind(kind))
    canonical = _aliases(plugins, kind).get(name, name)
    if canonical in registry:
        return registry[canonical]
    names = algorithm_names(plugins, kind)
    near = difflib.get_close_matches(name, names, n=1)
    hint = f" Did you mean '{near[0]}'?" if near else ""
    raise ConfigError(
        f"{CHOSEN_BY[kind]}: '{name}' is not an installed {kind.replace('_', ' ')}.{hint} "
        f"Choose one of: {', '.join(names) or '(none)'}; a plugin may register more (`astuner plugins list`)."
    )


def _loss_options(reg: Registration, args: Mapping[str, Any]) -> Any:
    """`policy_loss_args` validated by the loss's settings model; a ConfigError naming the key in it."""
    if reg.settings is None:
        if args:
            raise ConfigError(
                f"{LOSS_ARGS_KEY}: policy loss '{reg.name}' takes no settings, but "
                f"{', '.join(map(str, args))} were given. Remove them, or choose a loss that declares them."
            )
        return None
    try:
        return reg.settings.model_validate(dict(args))
    except ValidationError as exc:
        error = exc.errors()[0]
        key = ".".join([LOSS_ARGS_KEY, *map(str, error["loc"])])
        if error["type"] == "extra_forbidden":
            takes = ", ".join(reg.settings.model_fields) or "(none)"
            raise ConfigError(
                f"{key}: policy loss '{reg.name}' has no such setting. "
                f"Remove it, or use one it takes: {takes}."
            ) from None
        raise ConfigError(
            f"{key}: {error['msg']} (got {error['input']!r}); policy loss '{reg.name}' reads it."
        ) from None
