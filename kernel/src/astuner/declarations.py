"""What plugins declare about the config, so the kernel holds no table of them.

A registration may state what the kernel would otherwise hard-code about
it (see `astuner.hookspecs.Register`): the config keys a backbone reads,
where its engine-only keys live, the old names the seeds gave a judge, the
environment variables that turn a notifier on, an algorithm's counterparts
in the engines that compute it themselves, its other names and the clip
settings a policy loss wants by default. `Declarations.checked`
validates one registration's; `declared()` gathers every loaded plugin's into
the tables `astuner.compat` translates and judges a config with.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, get_args

from astuner.config_sections import LossAggMode
from astuner.import_strings import is_import_string

if TYPE_CHECKING:
    from astuner.plugins import Plugins

# kind -> the config key that chooses one by name: where a registration's `old_names` are read.
CHOSEN_BY = {
    "reader": "task_reader.type",
    "workflow": "rollout.agentscope_workflow",
    "judge": "task_judge.judge_protocol",
    "engine": "rollout.engine",
    "executor": "rollout.executor",
}

# The seeds' environment variables that turn on a notifier of this repository: a missing one is
# named with its install line (`astuner.plugins.install_hint`). An installed notifier declares its
# own (`switched_on_by`).
MOVED_OUT_SWITCHES: dict[str, str] = {"PHONE_NUMBERS": "sms"}

# The kinds that are training algorithms: they may name their counterparts in engines and other names.
ALGORITHM_KINDS = ("advantage_estimator", "policy_loss")

# The `trainer_common` keys a policy loss may give defaults for (used when the user leaves them unset).
LOSS_DEFAULT_KEYS = ("clip_ratio_low", "clip_ratio_high", "loss_agg_mode")


@dataclass(frozen=True)
class Declarations:
    """One registration's declarations; `reads` is None for a backbone that declared none."""

    reads: tuple[str, ...] | None = None
    key_homes: Mapping[str, str] = field(default_factory=dict)
    old_names: tuple[str, ...] = ()
    switched_on_by: tuple[str, ...] = ()
    counterparts: Mapping[str, Any] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()

    @classmethod
    def checked(
        cls,
        kind: str,
        what: str,
        reads: Iterable[str] | None = None,
        key_homes: Mapping[str, str] | None = None,
        old_names: Iterable[str] = (),
        switched_on_by: Iterable[str] = (),
        counterparts: Mapping[str, Any] | None = None,
        defaults: Mapping[str, Any] | None = None,
        aliases: Iterable[str] = (),
    ) -> Declarations:
        """The declarations `register()` was given for `what`, a `kind`; refused where they mean nothing."""
        homes = dict(key_homes or {})
        if not all(isinstance(k, str) and k and isinstance(v, str) and v for k, v in homes.items()):
            raise TypeError(f"key_homes of {what} must map key names to dotted keys, got {homes!r}")
        if homes and kind != "backbone":
            raise ValueError(f"key_homes means nothing for {what}; see `astuner.api.Register`")
        theirs = dict(counterparts or {})
        if not all(isinstance(k, str) and k for k in theirs):
            raise TypeError(f"counterparts of {what} must map backbone names to values, got {theirs!r}")
        if theirs and kind not in ALGORITHM_KINDS:
            raise ValueError(f"counterparts means nothing for {what}; see `astuner.api.Register`")
        alias_names = _strings("aliases", aliases, what, kind in ALGORITHM_KINDS)
        if any(is_import_string(alias) for alias in alias_names):
            raise ValueError(
                f"aliases of {what} must be plain names without ':' or '->', got {alias_names!r}"
            )
        return cls(
            reads=None if reads is None else _strings("reads", reads, what, kind == "backbone"),
            key_homes=homes,
            old_names=_strings("old_names", old_names, what, kind in CHOSEN_BY),
            switched_on_by=_strings("switched_on_by", switched_on_by, what, kind == "notifier"),
            counterparts=theirs,
            defaults=_loss_defaults(dict(defaults or {}), what, kind == "policy_loss"),
            aliases=alias_names,
        )


@dataclass(frozen=True)
class Declared:
    """Every loaded plugin's declarations, as the tables `astuner.compat` reads.

    `read_by`: dotted prefix -> the backbones that read keys under it (the
    longest declared prefix decides; a key under none is read by all);
    `judged`: the backbones that declared what they read; `backbones`: every
    registered one; `key_homes`: backbone -> engine-only key -> its home;
    `old_names`: kind -> old spelling -> today's name; `switches`:
    environment variable -> the notifier it turns on.
    """

    read_by: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    judged: frozenset[str] = frozenset()
    backbones: frozenset[str] = frozenset()
    key_homes: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    old_names: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    switches: Mapping[str, str] = field(default_factory=dict)


def declared(plugins: Plugins) -> Declared:
    """Gather the declarations of every loaded plugin's registrations."""
    backbones = plugins.registry("backbone")
    read_by: dict[str, list[str]] = {}
    for name, reg in backbones.items():
        for prefix in reg.declares.reads or ():
            read_by.setdefault(prefix, []).append(name)
    old_names: dict[str, dict[str, str]] = {}
    for kind in CHOSEN_BY:
        for name, reg in plugins.registry(kind).items():
            for old in reg.declares.old_names:
                old_names.setdefault(kind, {})[old_spelling(old)] = name
    switches = dict(MOVED_OUT_SWITCHES)  # named even when their notifier is not installed
    for name, reg in plugins.registry("notifier").items():
        switches.update(dict.fromkeys(reg.declares.switched_on_by, name))
    return Declared(
        read_by={prefix: tuple(names) for prefix, names in read_by.items()},
        judged=frozenset(name for name, reg in backbones.items() if reg.declares.reads is not None),
        backbones=frozenset(backbones),
        key_homes={name: reg.declares.key_homes for name, reg in backbones.items() if reg.declares.key_homes},
        old_names=old_names,
        switches=switches,
    )


def old_spelling(name: str) -> str:
    """An old name as the registrations spell it: an import string as `module->Class`, without spaces."""
    return name.replace(":", "->", 1).replace(" ", "") if is_import_string(name) else name


def _loss_defaults(defaults: dict[str, Any], what: str, allowed: bool) -> dict[str, Any]:
    """A policy loss's `defaults`, checked as `trainer_common` would check the user's values."""
    if defaults and not allowed:
        raise ValueError(f"defaults means nothing for {what}; see `astuner.api.Register`")
    unknown = sorted(set(defaults) - set(LOSS_DEFAULT_KEYS))
    if unknown:
        raise ValueError(
            f"defaults of {what} may set only {', '.join(LOSS_DEFAULT_KEYS)}; "
            f"not {', '.join(map(str, unknown))}"
        )
    for key in ("clip_ratio_low", "clip_ratio_high"):
        value = defaults.get(key, 0.0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise TypeError(f"defaults of {what}: {key} must be a number >= 0, got {value!r}")
    modes = get_args(LossAggMode)
    if defaults.get("loss_agg_mode", modes[0]) not in modes:
        raise ValueError(
            f"defaults of {what}: loss_agg_mode must be one of {', '.join(modes)}, "
            f"got {defaults['loss_agg_mode']!r}"
        )
    return defaults


def _strings(keyword: str, values: Iterable[str], what: str, allowed: bool) -> tuple[str, ...]:
    """A declaration's strings as a tuple; refused on a kind it means nothing for, or when not strings."""
    if isinstance(values, str):
        raise TypeError(f"{keyword} of {what} must be a list of strings, not the string {values!r}")
    out = tuple(values)
    if not all(isinstance(v, str) and v for v in out):
        raise TypeError(f"{keyword} of {what} must hold non-empty strings, got {out!r}")
    if out and not allowed:
        raise ValueError(f"{keyword} means nothing for {what}; see `astuner.api.Register`")
    return out
