"""The `astuner:` block's settings (`AstunerConfig`), and how they are loaded.

Sources, lowest to highest precedence: defaults < YAML file < environment
(`ASTUNER__ROLLOUT__TEMPERATURE=0.7`) < command line (`-o rollout.temperature=0.7`).

A config file looks like the seeds' tutorials: an `astuner:` block, optional
`verl:` / `trinity:` blocks passed verbatim to those engines, and optional
Hydra leftovers (`hydra:`, `defaults:`) that are ignored with one warning.
Plugin sub-blocks (`task_reader.<reader>`, `task_judge.<judge>`, a backbone's
own block) are kept as raw mappings here and validated by the plugin's own
settings model when it is used (see `astuner.components`). The sections'
models are in `astuner.config_sections`; where each value came from is
kept by `astuner.config_origins`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import Field, PrivateAttr, ValidationError, field_validator
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict

from astuner import compat
from astuner.config_errors import explain_validation_error
from astuner.config_origins import ENV_PREFIX, PASSTHROUGH_BLOCKS, ConfigOrigins, Layer
from astuner.config_paths import ConfigPath, base_for, resolve, resolve_local
from astuner.config_sections import (
    AUXILIARY_NAME,
    AgentConfig,
    AuxiliaryModelConfig,
    ContextTrackerConfig,
    DataConfig,
    DebugConfig,
    HealthConfig,
    ModelConfig,
    RolloutConfig,
    TaskJudgeConfig,
    TaskReaderConfig,
    TrainerCommonConfig,
)
from astuner.config_yaml import MAX_DEPTH, load_yaml
from astuner.declarations import declared
from astuner.errors import ConfigError

if TYPE_CHECKING:
    from astuner.plugins import Plugins

IGNORED_BLOCKS = ("hydra", "defaults")


class AstunerConfig(BaseSettings):
    """The resolved `astuner:` block, plus the verbatim engine passthrough blocks.

    Extra top-level keys are allowed only as the settings block of a
    backbone (e.g. `torch:`); `astuner.components.check_plugin_blocks`
    rejects any other.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="allow", case_sensitive=False
    )

    project_name: str = "astuner_project"
    experiment_name: str = Field("read_yaml_name", description="read_yaml_name: the YAML file stem.")
    experiment_dir: str = Field("launcher_record", description="Root folder of experiment records.")
    backbone: str = "debug"
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    task_reader: TaskReaderConfig = Field(default_factory=TaskReaderConfig)
    task_judge: TaskJudgeConfig = Field(default_factory=TaskJudgeConfig)
    trainer_common: TrainerCommonConfig = Field(default_factory=TrainerCommonConfig)
    context_tracker: ContextTrackerConfig = Field(default_factory=ContextTrackerConfig)
    debug: DebugConfig = Field(default_factory=DebugConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)
    auxiliary_models: dict[str, AuxiliaryModelConfig] = Field(
        default_factory=dict,
        description="Named models the workflow and judge call, never trained (judges, other agents).",
    )
    agents: dict[str, AgentConfig] = Field(
        default_factory=dict,
        description="Per-agent settings by agent name (a role of a multi-agent workflow): "
        "{wolf: {lora: {rank: 8}}} gives agent wolf an adapter of its own.",
    )
    notify: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Notifiers told once when the run ends, by name, with their settings "
        "(astuner-notify's webhook: {url: ...}, command: {command: ...}, sms: {...}).",
    )
    verl: dict[str, Any] = Field(default_factory=dict, description="Passed verbatim to verl.")
    trinity: dict[str, Any] = Field(default_factory=dict, description="Passed verbatim to Trinity.")

    _source: Path | None = PrivateAttr(None)
    _origins: ConfigOrigins | None = PrivateAttr(None)
    _paths: dict[str, ConfigPath] = PrivateAttr(default_factory=dict)

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: Any, **sources: Any
    ) -> tuple[Any, ...]:
        # `load_config` reads the environment itself, as one layer translated from the
        # tutorials' spellings; validation must not read it a second time, untranslated.
        return (init_settings,)

    @field_validator("auxiliary_models", "agents")
    @classmethod
    def _names(cls, value: dict[str, Any]) -> dict[str, Any]:
        # A name is part of gateway URLs, adapter folders and `-o agents.NAME.key=...` overrides.
        bad = [name for name in value if not AUXILIARY_NAME.fullmatch(name)]
        if bad:
            raise ValueError(
                f"name(s) {', '.join(map(repr, bad))} must start with a letter or _ and "
                "hold only letters, digits, _ and -"
            )
        return value

    @property
    def source(self) -> Path | None:
        """The YAML file this config was loaded from, if any."""
        return self._source

    @property
    def origins(self) -> ConfigOrigins | None:
        """Where each value came from (None for a config not made by `load_config`)."""
        return self._origins

    @property
    def astuner(self) -> AstunerConfig:
        """This config: workflows written for the seeds read `config.astuner.rollout...`."""
        return self

    @property
    def astune(self) -> AstunerConfig:
        """This config, under the system's old name (`config.astune.rollout.multi_turn.max_steps`)."""
        return self

    def path_of(self, dotted: str) -> ConfigPath | None:
        """How the local path at `dotted` (e.g. `model.path`) was resolved: what was written, from where."""
        return self._paths.get(dotted)

    def search_paths(self) -> list[Path]:
        """Where import strings are looked up: the working directory and the config's folder."""
        paths = [Path.cwd()]
        if self._source is not None:
            paths.append(self._source.resolve().parent)
        return paths

    def to_yaml_dict(self) -> dict[str, Any]:
        """The file form: `astuner:` block plus non-empty passthrough blocks."""
        data = self.model_dump(mode="json", by_alias=False)
        out: dict[str, Any] = {"astuner": {k: v for k, v in data.items() if k not in PASSTHROUGH_BLOCKS}}
        for block in PASSTHROUGH_BLOCKS:
            if data[block]:
                out[block] = data[block]
        return out


def load_config(
    path: str | Path | None,
    overrides: list[str] | None = None,
    environ: dict[str, str] | None = None,
    *,
    defaults: dict[str, Any] | None = None,
    arguments: dict[str, Any] | None = None,
    backbone: str | None = None,
    for_training: bool = True,
    plugins: Plugins | None = None,
) -> AstunerConfig:
    """Load, merge and validate a config; raise `ConfigError` with a readable reason.

    `for_training=False` skips the notice of keys the backbone never reads,
    for a command that runs no backbone's training: `astuner eval` reads none
    of the training keys, `data preview` and `config show` run nothing.

    The Python API (`astuner.tune()`) adds two layers: `defaults`, laid under
    the file (its objects' default values), and `arguments`, laid over the
    environment and under `overrides` (the values it was given explicitly).
    `backbone` (the CLI's `--backbone`) is laid over everything. Each layer
    is read through `astuner.compat` first, so the tutorials' old spellings
    load with one notice each.

    What the plugins declare about the config (which backbone reads which
    key, the old names they accept) comes from `plugins`, by default every
    installed plugin.
    """
    source = Path(path) if path is not None else None
    file_data, notices = _read_config_file(source) if source is not None else ({}, [])
    environ = dict(os.environ) if environ is None else environ
    raw_layers = [
        Layer("defaults", defaults or {}),
        Layer("file", file_data),
        Layer("env", _env_values(environ)),
        Layer("arguments", arguments or {}),
        Layer("override", parse_overrides(overrides or [])),
        Layer("backbone", {"backbone": backbone} if backbone else {}),
    ]
    merged: dict[str, Any] = {}
    for layer in raw_layers:
        merged = deep_merge(merged, layer.data)
    chosen = str(merged.get("backbone") or AstunerConfig.model_fields["backbone"].default)
    known = declared(plugins if plugins is not None else _installed_plugins())
    layers = []
    for layer in raw_layers:
        translation = compat.translate(
            layer.data, chosen, layer.describe(source), known, verbatim=PASSTHROUGH_BLOCKS
        )
        notices += translation.notices
        layers.append(Layer(layer.kind, translation.data, translation.renamed))
    merged = {}
    for layer in layers:
        merged = deep_merge(merged, layer.data)
    by_kind = {layer.kind: layer.data for layer in layers}
    try:
        config = AstunerConfig.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(
            explain_validation_error(
                exc,
                AstunerConfig,
                source,
                by_kind["env"],
                deep_merge(by_kind["override"], by_kind["backbone"]),
                arguments=by_kind["arguments"],
            )
        ) from exc
    config._source = source
    config._origins = ConfigOrigins(source, layers)
    if config.experiment_name == "read_yaml_name":
        config.experiment_name = source.stem if source is not None else "default"
        config._origins.computed["experiment_name"] = "read_yaml_name: the config file's name"
    _resolve_paths(config)
    compat.emit_notices(notices)
    if for_training:
        compat.notify_unused(config._origins.explicit_keys(), config.backbone, known, config.rollout.engine)
    return config


def _resolve_paths(config: AstunerConfig) -> None:
    """Make the local paths of the `astuner:` block absolute (`astuner.config_paths` says from where).

    Only values the config file set change; plugin blocks' paths are resolved
    when their settings are validated (`astuner.components.plugin_settings`). A value that may be a hub id
    (`model.path`, `auxiliary_models.*.path`) is changed only where it names
    a local path.
    """

    def local(dotted: str, value: str, *, hub: bool) -> str:
        if base_for(config, dotted) == Path.cwd():
            return value  # not from the file: the loaders take it from the working directory as is
        resolved = resolve_local(config, dotted, value) if hub else str(resolve(config, dotted, value))
        if resolved != value:
            config._paths[dotted] = resolve(config, dotted, value)
            if config._origins is not None:
                config._origins.computed[dotted] = f"written {config._paths[dotted].describe()}"
        return resolved

    config.model.path = local("model.path", config.model.path, hub=True)
    for name, spec in config.auxiliary_models.items():
        spec.path = local(f"auxiliary_models.{name}.path", spec.path, hub=True)
    for name, agent in config.agents.items():
        if agent.lora is not None and agent.lora.path:
            agent.lora.path = local(f"agents.{name}.lora.path", agent.lora.path, hub=False)
    if config.trainer_common.resume not in ("disable", "auto"):
        config.trainer_common.resume = local("trainer_common.resume", config.trainer_common.resume, hub=False)


def _installed_plugins() -> Plugins:
    """Every installed plugin, for a config loaded without the caller's plugins."""
    from astuner.plugins import Plugins

    return Plugins()


def _read_config_file(path: Path) -> tuple[dict[str, Any], list[str]]:
    """A file's `astuner:` block (passthrough blocks folded in), and notices about its spelling."""
    if not path.exists():
        raise ConfigError(f"Config file '{path}' does not exist. Pass an existing YAML file to --conf.")
    if path.is_dir():
        raise ConfigError(f"Config path '{path}' is a folder; pass a YAML file to --conf.")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ConfigError(
            f"Config file '{path}' is not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line}, column "
            f"{column}. Save it as UTF-8."
        ) from exc
    try:
        raw = load_yaml(text, f"Config file '{path}'")
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"Config file '{path}' is not valid YAML{where}: {problem}.") from exc
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"Config file '{path}' must hold a mapping with an 'astuner:' block.")
    raw, notices = compat.translate_root(raw, f"config file '{path}'")
    unknown = [k for k in raw if k not in ("astuner", *PASSTHROUGH_BLOCKS, *IGNORED_BLOCKS)]
    if unknown:
        raise ConfigError(
            f"Config file '{path}' has unknown top-level key(s): {', '.join(map(str, unknown))}. "
            "Valid top-level keys are 'astuner', 'verl' and 'trinity' (and 'hydra'/'defaults', "
            "which are ignored). Put astuner settings under 'astuner:'."
        )
    ignored = [k for k in IGNORED_BLOCKS if k in raw]
    if ignored:
        notices.append(
            f"Hydra keys {', '.join(ignored)} are ignored (config file '{path}'): astuner composes its "
            "own defaults."
        )
    block = raw.get("astuner") or {}
    if not isinstance(block, dict):
        raise ConfigError(f"Config file '{path}': the 'astuner:' block must be a mapping.")
    data = dict(block)
    for name in PASSTHROUGH_BLOCKS:
        if raw.get(name) is not None:
            if not isinstance(raw[name], dict):
                raise ConfigError(f"Config file '{path}': the '{name}:' block must be a mapping.")
            data[name] = deep_merge(data.get(name) or {}, raw[name])
    return data, notices


def _env_values(environ: dict[str, str]) -> dict[str, Any]:
    """ASTUNER__A__B=v variables as a nested mapping; an unknown top-level name is an error."""
    fields = set(AstunerConfig.model_fields)
    for name, value in environ.items():
        if name.upper().startswith(ENV_PREFIX):
            _check_env_shape(name, value)
            top = name[len(ENV_PREFIX) :].split("__", 1)[0].lower()
            if top not in fields:
                raise ConfigError(
                    f"Environment variable {name} names no config key '{top}'. "
                    f"Top-level keys: {', '.join(sorted(fields))}."
                )
    source = EnvSettingsSource(
        AstunerConfig, case_sensitive=False, env_prefix=ENV_PREFIX, env_nested_delimiter="__"
    )
    source.env_vars = {k.lower(): v for k, v in environ.items()}
    return source()


def _check_env_shape(name: str, value: str) -> None:
    """Refuse an ASTUNER__ variable whose key or JSON value would overflow the recursive merging."""
    parts = name[len(ENV_PREFIX) :].split("__")
    if len(parts) > MAX_DEPTH:
        raise ConfigError(
            f"Environment variable {_shorten(name)} names a key {len(parts)} levels deep; config keys "
            f"have a few levels (ASTUNER__ROLLOUT__TEMPERATURE), at most {MAX_DEPTH}. Unset it."
        )
    if not all(parts):
        raise ConfigError(
            f"Environment variable {_shorten(name)} names an empty key ('__' twice in a row, or at its "
            "end). Name each level once, as in ASTUNER__ROLLOUT__TEMPERATURE."
        )
    if value.lstrip()[:1] not in ("[", "{"):
        return
    try:
        depth = _depth(json.loads(value))
    except RecursionError:
        depth = MAX_DEPTH + 1
    except ValueError:
        return  # not JSON: the settings source keeps it as text
    if len(parts) + depth > MAX_DEPTH:
        raise ConfigError(
            f"Environment variable {_shorten(name)} holds JSON nested more than {MAX_DEPTH} levels "
            "deep. A config needs a few levels: flatten the value."
        )


def _depth(value: Any) -> int:
    """Levels of nested lists and mappings in `value`, counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, depth)
            stack.extend((child, depth + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def _shorten(text: str) -> str:
    """`text` cut to a readable length for an error message (a hostile key can be megabytes)."""
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text):,} characters)"


def parse_overrides(pairs: list[str]) -> dict[str, Any]:
    """`["rollout.temperature=0.7"]` -> `{"rollout": {"temperature": 0.7}}` (values read as YAML)."""
    out: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw_value = pair.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            raise ConfigError(
                f"Cannot read the override '{pair}': write it as -o section.key=value, "
                "e.g. -o rollout.temperature=0.7."
            )
        if key.startswith("astuner."):
            key = key[len("astuner.") :]
        if key.count(".") >= MAX_DEPTH:
            raise ConfigError(
                f"The override '{_shorten(pair)}' names a key {key.count('.') + 1} levels deep; config "
                f"keys have a few levels (-o rollout.temperature=0.7), at most {MAX_DEPTH}."
            )
        try:
            value = load_yaml(raw_value, f"The override '{_shorten(pair)}'") if raw_value.strip() else ""
        except yaml.YAMLError:
            value = raw_value
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"Override '{pair}' conflicts with another override of '{part}'.")
        node[leaf] = value
    return out


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """A new mapping: `update` laid over `base`, mappings merged key by key."""
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out
