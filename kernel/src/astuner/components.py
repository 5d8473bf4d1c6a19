"""Build the plugins a config names, each with its own validated settings block.

The config keeps plugin sub-blocks as raw mappings (`task_reader.jsonl: {...}`);
this module checks that every such block belongs to an installed plugin and
validates it against that plugin's settings model when the plugin is built.
"""

from __future__ import annotations

import difflib
import inspect
from typing import Any

from pydantic import BaseModel, ValidationError

from astuner.config import AstunerConfig
from astuner.config_errors import describe_origin, explain_validation_error
from astuner.config_sections import ModelConfig
from astuner.core.toolcalls import tool_parsers
from astuner.errors import ConfigError, PluginError
from astuner.plugins import Plugins, Registration, install_hint
from astuner.protocols import Backbone, Judge, TaskReader, WorkflowExecutor

# `rollout.executor` for workflows run in the runner's own event loop: the default, and no plugin.
LOCAL_EXECUTOR = "local"


def _plugin_blocks(config: AstunerConfig) -> list[tuple[str, str, dict[str, Any]]]:
    """(kind, dotted section, {plugin name: raw block}) for every place plugin blocks live."""
    return [
        ("reader", "task_reader", config.task_reader.model_extra or {}),
        ("judge", "task_judge", config.task_judge.model_extra or {}),
        ("engine", "rollout.engines", config.rollout.engines),
        ("madness_check", "rollout.madness", config.rollout.madness),
        ("notifier", "notify", config.notify),
        ("backbone", "", config.model_extra or {}),
    ]


def check_plugin_blocks(config: AstunerConfig, plugins: Plugins) -> None:
    """Every plugin sub-block must name an installed plugin of the right kind (auxiliary models' too).

    `rollout.executor` must name an installed executor too, so that a run
    never starts on one that is missing.
    """
    for kind, section, blocks in _plugin_blocks(config):
        registry = plugins.registry(kind)
        for name in blocks:
            if name in registry:
                continue
            key = f"{section}.{name}" if section else name
            origin = _origin(config, key)
            section_model = _section_model(config, section)
            valid = list(getattr(section_model, "model_fields", {})) + list(registry)
            near = difflib.get_close_matches(name, valid, n=1, cutoff=0.5)
            hint = f" Did you mean '{(section + '.') if section else ''}{near[0]}'?" if near else ""
            hint = f" {moved}" if (moved := install_hint(kind, name)) else hint
            what = f"a key of '{section}'" if section else "a top-level key"
            raise ConfigError(
                f"Unknown key '{key}' in {origin}: it is neither {what} nor the settings block "
                f"of an installed {kind.replace('_', ' ')} (installed: "
                f"{', '.join(sorted(registry)) or 'none'}).{hint}"
            )
    check_auxiliary_models(config, plugins)
    check_executor(config, plugins)


def plugin_settings(config: AstunerConfig, reg: Registration) -> BaseModel | None:
    """The plugin's settings block, validated by its own model (defaults if absent)."""
    if reg.settings is None:
        return None
    for kind, section, blocks in _plugin_blocks(config):
        if kind == reg.kind:
            raw = blocks.get(reg.name) or {}
            try:
                return reg.settings.model_validate(raw)
            except ValidationError as exc:
                prefix = f"{section}.{reg.name}" if section else reg.name
                raise ConfigError(_explain(config, exc, reg.settings, prefix)) from exc
    return reg.settings()


def build(config: AstunerConfig, plugins: Plugins, kind: str, name: str) -> Any:
    """Find `name` among plugins of `kind` (or import it) and build it with its settings.

    A factory that declares a `config` and/or `plugins` parameter also gets
    the resolved config and the plugin manager (e.g. a judge that builds an
    auxiliary model from `task_judge.alien_llm_model`).
    """
    reg = plugins.get(kind, name, search_paths=config.search_paths())
    extra = {
        key: value for key, value in (("config", config), ("plugins", plugins)) if _accepts(reg.factory, key)
    }
    if not extra:
        return reg.build(plugin_settings(config, reg))
    settings = plugin_settings(config, reg)
    return reg.factory(settings, **extra) if reg.settings is not None else reg.factory(**extra)


def _accepts(factory: Any, name: str) -> bool:
    try:
        return name in inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return False


def build_reader(config: AstunerConfig, plugins: Plugins) -> TaskReader:
    """The task reader named by `task_reader.type`, built with its settings block."""
    reader = build(config, plugins, "reader", config.task_reader.type)
    if not isinstance(reader, TaskReader):
        raise PluginError(f"Reader '{config.task_reader.type}' built an object without read(split).")
    return reader


def build_judge(config: AstunerConfig, plugins: Plugins) -> Judge:
    judge = build(config, plugins, "judge", config.task_judge.judge_protocol)
    if not isinstance(judge, Judge):
        raise PluginError(
            f"Judge '{config.task_judge.judge_protocol}' built an object without async judge(task, output)."
        )
    return judge


def build_backbone(config: AstunerConfig, plugins: Plugins) -> Backbone:
    backbone = build(config, plugins, "backbone", config.backbone)
    if not isinstance(backbone, Backbone):
        raise PluginError(f"Backbone '{config.backbone}' built an object without run(ctx).")
    return backbone


def check_executor(config: AstunerConfig, plugins: Plugins) -> None:
    """`rollout.executor` is `local` or an installed executor (or an import string)."""
    if config.rollout.executor == LOCAL_EXECUTOR:
        return
    try:
        plugins.get("executor", config.rollout.executor, search_paths=config.search_paths())
    except PluginError as exc:
        raise ConfigError(
            f"rollout.executor: {exc} Without one, '{LOCAL_EXECUTOR}' (the default) runs workflows in the "
            "runner's own process."
        ) from exc


def build_executor(config: AstunerConfig, plugins: Plugins) -> WorkflowExecutor | None:
    """The executor `rollout.executor` names; None for `local`."""
    check_executor(config, plugins)
    if config.rollout.executor == LOCAL_EXECUTOR:
        return None
    executor = build(config, plugins, "executor", config.rollout.executor)
    if not isinstance(executor, WorkflowExecutor):
        raise PluginError(
            f"Executor '{config.rollout.executor}' built an object without session(runner) and "
            "async run_workflow(runner, workflow_task, tuner)."
        )
    return executor


def _section_model(config: AstunerConfig, section: str) -> Any:
    node: Any = config
    for part in filter(None, section.split(".")):
        node = getattr(node, part)
    return type(node) if isinstance(node, BaseModel) else None


def engine_name(config: AstunerConfig, plugins: Plugins) -> str:
    """`rollout.engine`, with `auto` meaning: vllm at `rollout.engine_url` if set, else transformers."""
    return _resolve_engine(config.rollout.engine, config.rollout.engine_url, plugins, "rollout")


def _resolve_engine(name: str, url: str | None, plugins: Plugins, section: str) -> str:
    if name != "auto":
        return name
    if url:
        return "vllm"
    if "transformers" in plugins.registry("engine"):
        return "transformers"
    raise PluginError(
        f"{section}.engine is 'auto' but no local engine is installed and {section}.engine_url is not "
        f"set. Install astuner-backbone-torch (engine 'transformers'), point {section}.engine_url "
        f"at a vLLM server, or set {section}.engine to an installed engine "
        f"({', '.join(sorted(plugins.registry('engine'))) or 'none'})."
    )


def build_engine(config: AstunerConfig, plugins: Plugins) -> Any:
    """The configured inference engine, built with its settings and the whole config."""
    reg = plugins.get("engine", engine_name(config, plugins), search_paths=config.search_paths())
    return reg.build(plugin_settings(config, reg), config)


def check_auxiliary_models(config: AstunerConfig, plugins: Plugins) -> None:
    """Every `auxiliary_models` entry names an installed engine, with valid settings and tool parser."""
    for name in config.auxiliary_models:
        _auxiliary_engine(config, plugins, name)


def build_auxiliary_engine(config: AstunerConfig, plugins: Plugins, name: str) -> Any:
    """The engine of auxiliary model `name`, built as the main engine is, on that model."""
    reg, settings = _auxiliary_engine(config, plugins, name)
    return reg.build(settings, auxiliary_engine_config(config, name))


def auxiliary_engine_config(config: AstunerConfig, name: str) -> AstunerConfig:
    """The config an auxiliary model's engine is built with.

    Engines read their model, server and context length from `model.path`,
    `rollout.engine_url`, `rollout.max_model_len` (and their settings from
    `rollout.engines`), so the auxiliary model's values go there, and the
    main model's never reach its engine.
    """
    spec = config.auxiliary_models[name]
    aux = config.model_copy(deep=True)
    aux.model = ModelConfig(path=spec.path)
    aux.auxiliary_models = {}
    r = aux.rollout
    r.engine, r.engine_url, r.engines = spec.engine, spec.engine_url, dict(spec.engines)
    r.max_model_len, r.max_response_length_in_one_turn = spec.max_model_len, spec.max_tokens
    r.tensor_model_parallel_size = spec.tensor_model_parallel_size
    return aux


def _auxiliary_engine(
    config: AstunerConfig, plugins: Plugins, name: str
) -> tuple[Registration, BaseModel | None]:
    """The registration and validated settings of auxiliary model `name`'s engine; errors name its keys."""
    spec = config.auxiliary_models[name]
    section = f"auxiliary_models.{name}"
    installed = plugins.registry("engine")
    engine = _resolve_engine(spec.engine, spec.engine_url, plugins, section)
    try:
        reg = plugins.get("engine", engine, search_paths=config.search_paths())
    except PluginError as exc:
        raise ConfigError(f"{section}.engine: {exc}") from exc
    for block in spec.engines:
        if block not in installed:
            key = f"{section}.engines.{block}"
            near = difflib.get_close_matches(block, list(installed), n=1, cutoff=0.5)
            hint = f" Did you mean '{section}.engines.{near[0]}'?" if near else ""
            raise ConfigError(
                f"Unknown key '{key}' in {_origin(config, key)}: it is "
                f"not the settings block of an installed engine (installed: "
                f"{', '.join(sorted(installed)) or 'none'}).{hint}"
            )
    if spec.tool_parser not in tool_parsers():
        key = f"{section}.tool_parser"
        raise ConfigError(
            f"Invalid value for '{key}' in {_origin(config, key)}: no "
            f"tool-call parser '{spec.tool_parser}'. Choose one of: {', '.join(tool_parsers())}."
        )
    if reg.settings is None:
        return reg, None
    try:
        return reg, reg.settings.model_validate(spec.engines.get(reg.name) or {})
    except ValidationError as exc:
        prefix = f"{section}.engines.{reg.name}"
        raise ConfigError(_explain(config, exc, reg.settings, prefix)) from exc


def _origin(config: AstunerConfig, key: str) -> str:
    """Where `key`'s value came from: a `-o` or ASTUNER__ value is never blamed on the file."""
    if config.origins is not None:
        return config.origins.describe(key.split("."))
    return describe_origin(key.split("."), config.source, {}, {})


def _explain(config: AstunerConfig, exc: ValidationError, model: type[BaseModel], prefix: str) -> str:
    if config.origins is not None:
        return config.origins.explain(exc, model, prefix)
    return explain_validation_error(exc, model, config.source, {}, {}, prefix=prefix)
