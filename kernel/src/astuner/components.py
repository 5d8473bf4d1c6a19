"""Build the plugins a config names, each with its own validated settings block and named services.

The config keeps plugin sub-blocks as raw mappings (`task_reader.jsonl: {...}`);
this module checks that every such block belongs to an installed plugin and
validates it against that plugin's settings model when the plugin is built.
A factory never sees the whole config: besides its block it gets the
services its signature names (`build`), and an engine the `EngineModel` it
serves, made here from the config for the main and the auxiliary models.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from astuner.config import AstunerConfig
from astuner.config_errors import describe_origin, explain_validation_error
from astuner.config_paths import LOCAL_OR_HUB, ConfigPath, missing_message, resolve_settings
from astuner.core.health import check_acknowledged
from astuner.core.metric_catalog import metric_catalog
from astuner.core.toolcalls import tool_parsers
from astuner.errors import ConfigError, PluginError
from astuner.plugins import Plugins, Registration, missing_block_message
from astuner.protocols import Backbone, Judge, TaskReader, WorkflowExecutor
from astuner.rollout.engine_model import EngineModel

# `rollout.executor` for workflows run in the runner's own event loop: the default, and no plugin.
LOCAL_EXECUTOR = "local"

# The engine that loads `model.path` from this machine's disk (backbone-torch's), and `auto`'s choice
# without `rollout.engine_url`. Every other engine reaches the model through a server, which may hold
# a folder this machine has not.
LOCAL_ENGINE = "transformers"


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
    never starts on one that is missing; `health.acknowledged` only health
    checks that the loaded plugins' metrics declare.
    """
    for kind, section, blocks in _plugin_blocks(config):
        registry = plugins.registry(kind)
        for name in blocks:
            if name in registry:
                continue
            key = f"{section}.{name}" if section else name
            origin = _origin(config, key)
            if missing := missing_block_message(kind, name, key, origin):
                raise ConfigError(missing)
            section_model = _section_model(config, section)
            valid = list(getattr(section_model, "model_fields", {})) + list(registry)
            near = difflib.get_close_matches(name, valid, n=1, cutoff=0.5)
            hint = f" Did you mean '{(section + '.') if section else ''}{near[0]}'?" if near else ""
            what = f"a key of '{section}'" if section else "a top-level key"
            raise ConfigError(
                f"Unknown key '{key}' in {origin}: it is neither {what} nor the settings block "
                f"of an installed {kind.replace('_', ' ')} (installed: "
                f"{', '.join(sorted(registry)) or 'none'}).{hint}"
            )
    for kind, key, name in _chosen_plugins(config):
        _chosen_plugin(config, plugins, kind, key, name)
    check_auxiliary_models(config, plugins)
    check_executor(config, plugins)
    if config.health.acknowledged:
        check_acknowledged(
            config.health.acknowledged, metric_catalog(plugins), _origin(config, "health.acknowledged")
        )


def _chosen_plugins(config: AstunerConfig) -> list[tuple[str, str, str]]:
    """(kind, key, value) of the keys that choose a plugin by name or import string."""
    return [
        ("reader", "task_reader.type", config.task_reader.type),
        ("judge", "task_judge.judge_protocol", config.task_judge.judge_protocol),
    ]


def _chosen_plugin(config: AstunerConfig, plugins: Plugins, kind: str, key: str, name: str) -> Registration:
    """The plugin `key` chooses; a ConfigError naming the key and where it was set if none is installed.

    Checked with the plugin blocks, so that `config show` refuses what `run`
    refuses (an old reader name such as `dataset_file`), in the same words.
    """
    try:
        return plugins.get(kind, name, search_paths=config.search_paths())
    except PluginError as exc:
        raise ConfigError(f"{key}, from {_origin(config, key)}: {exc}") from exc


def plugin_settings(config: AstunerConfig, reg: Registration) -> BaseModel | None:
    """The plugin's settings block, validated by its own model (defaults if absent)."""
    if reg.settings is None:
        return None
    for kind, section, blocks in _plugin_blocks(config):
        if kind == reg.kind:
            raw = blocks.get(reg.name) or {}
            prefix = f"{section}.{reg.name}" if section else reg.name
            try:
                return resolve_settings(config, reg.settings.model_validate(raw), prefix)
            except ValidationError as exc:
                raise ConfigError(_explain(config, exc, reg.settings, prefix)) from exc
    return reg.settings()


def saved_config(config: AstunerConfig, plugins: Plugins) -> dict[str, Any]:
    """`config.to_yaml_dict()`, with the local paths of installed plugins' blocks as they resolved.

    For the run folder's `config.yaml`: a relative path there would be taken
    from the run folder when that file is loaded again (`astuner eval --conf
    <run>/config.yaml`, which the closing lines print), not from the folder
    of the config the run started from. The `astuner:` block's own paths are
    absolute already (`astuner.config_paths`).
    """
    data = config.to_yaml_dict()
    for kind, section, blocks in _plugin_blocks(config):
        for name, raw in blocks.items():
            target = _block_in(data["astuner"], section, name)
            if name not in plugins.registry(kind) or not isinstance(raw, dict) or target is None:
                continue
            reg = plugins.get(kind, name, config.search_paths())
            if reg.settings is None:
                continue
            prefix = f"{section}.{name}" if section else name
            try:
                resolved = resolve_settings(config, reg.settings.model_validate(raw), prefix)
            except ValidationError:
                continue  # the run reports a bad block where it reads it
            fields = type(resolved).model_fields
            for key in raw:
                value, field = getattr(resolved, key, None), fields.get(key)
                local = field is not None and field.json_schema_extra == LOCAL_OR_HUB
                if isinstance(value, ConfigPath) or (local and isinstance(value, str) and value != raw[key]):
                    target[key] = str(value)  # only what `resolve_settings` changed: no other value
    return data


def _block_in(data: dict[str, Any], section: str, name: str) -> dict[str, Any] | None:
    """The dict at `section.name` of a dumped `astuner:` block, or None."""
    node: Any = data
    for part in [*section.split("."), name] if section else [name]:
        node = node.get(part) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


SettingsOf = Callable[[str, str], BaseModel | None]
"""The `settings_of` service: `settings_of(kind, name)`, the validated settings block of a plugin.

A companion that serves a reader's environment reads that reader's block
(None when the plugin has no settings model):

```python
from pathlib import Path

from astuner.api import Companion, SettingsOf


def serve_env(value: str | None, run_folder: Path, settings_of: SettingsOf) -> Companion:
    reader = settings_of("reader", "my_env")  # the run's validated `task_reader.my_env` block
    return Companion(
        "my_env",
        ["my-env-server", "--port", str(reader.port)],
        health_url=f"http://127.0.0.1:{reader.port}/healthz",
        log_path=run_folder / "my_env.log",
    )
```
"""


@dataclass(frozen=True)
class WorkflowSource:
    """The `workflow_source` service: where a run's workflow comes from, for an executor.

    An executor that runs workflows in another process loads the workflow
    there (`load`) from its name (`rollout.agentscope_workflow`) and the
    run's search paths, and cuts a remote rollout after `rollout_timeout`
    seconds, as the runner does.
    """

    name: str
    search_paths: tuple[str, ...]
    rollout_timeout: float

    def load(self, plugins: Plugins) -> Any:
        """The workflow, ready to call (a `LoadedWorkflow`), as `plugins` provides it."""
        from astuner.rollout.workflow import adapt_workflow

        reg = plugins.get("workflow", self.name, search_paths=[Path(p) for p in self.search_paths])
        obj = reg.factory if reg.plugin.startswith("import:") else reg.build()
        return adapt_workflow(obj, f"'{self.name}'")


class Engines:
    """The `engines` service: builds any installed engine for a model of the plugin's choosing.

    A judge or workflow plugin that needs a model of its own (an LLM judge)
    builds its engine here from the engine's raw settings block and the
    `EngineModel` it should serve, never from a copy of the run's config.
    A factory asks for it by naming a parameter `engines`:

    ```python
    from pydantic import BaseModel

    from astuner.api import EngineModel, Engines


    class LlmJudgeSettings(BaseModel):
        model: str = "Qwen/Qwen2.5-7B-Instruct"
        engine: str = "auto"
        engine_settings: dict = {}


    class LlmJudge:
        def __init__(self, settings: LlmJudgeSettings, engines: Engines) -> None:
            model = EngineModel(path=settings.model, max_tokens=64)
            self.engine = engines.build(
                settings.engine, settings.engine_settings, model, key="task_judge.llm.engine_settings"
            )
    ```

    Outside a run (a test, a notebook), `Engines.installed()` serves the
    same.
    """

    def __init__(self, plugins: Plugins, search_paths: Sequence[Path] = ()) -> None:
        self._plugins = plugins
        self._search_paths = list(search_paths)

    @classmethod
    def installed(cls) -> Engines:
        """The service over every installed engine: for a part built outside a run (a test, a notebook)."""
        return cls(Plugins())

    def require(self, name: str, model: EngineModel, *, key: str = "") -> None:
        """Raise the ConfigError `build` would for an engine that is not installed; build nothing.

        For a plugin that builds its engine late (on first use) but should
        refuse a missing one where it is itself built, before any rollout.
        """
        self._registration(name, model, key or "engine settings")

    def _registration(self, name: str, model: EngineModel, where: str) -> tuple[str, Registration]:
        try:
            name = _resolve_engine(name, model.url, self._plugins, where)
            return name, self._plugins.get("engine", name, search_paths=self._search_paths)
        except PluginError as exc:
            raise ConfigError(f"{where}: {exc}") from exc

    def build(self, name: str, settings: Mapping[str, Any], model: EngineModel, *, key: str = "") -> Any:
        """Engine `name` serving `model`, with `settings` validated by that engine's settings model.

        `name` may be `auto` (vllm when `model.url` is set, else transformers).
        `key` is where `settings` came from (`task_judge.x.engine_settings`):
        errors name it, and the key within it that is wrong.
        """
        where = key or "engine settings"
        name, reg = self._registration(name, model, where)
        validated = None
        if reg.settings is not None:
            try:
                validated = reg.settings.model_validate(dict(settings))
            except ValidationError as exc:
                raise ConfigError(
                    explain_validation_error(exc, reg.settings, None, {}, {}, prefix=key)
                ) from exc
        elif settings:
            raise ConfigError(
                f"{where}: engine '{name}' takes no settings, yet {sorted(settings)} were given."
            )
        return _call(reg, validated, {}, model)


def main_engine_model(config: AstunerConfig) -> EngineModel:
    """The policy's model as its engine serves it: `model.path`, `rollout.*`, `trainer_common.seed`,
    and each `agents.<name>.lora.path` as that agent's fixed adapter (a path-less adapter is new,
    which changes nothing: that agent runs on the model alone)."""
    r = config.rollout
    return EngineModel(
        path=config.model.path,
        url=r.engine_url,
        max_model_len=r.max_model_len,
        max_tokens=r.max_response_length_in_one_turn,
        tensor_parallel_size=r.tensor_model_parallel_size,
        seed=config.trainer_common.seed,
        adapters={
            name: agent.lora.path
            for name, agent in config.agents.items()
            if agent.lora is not None and agent.lora.path is not None
        },
    )


def auxiliary_engine_model(config: AstunerConfig, name: str) -> EngineModel:
    """Auxiliary model `name` as its engine serves it: its own entry; the main model's never reach it."""
    spec = config.auxiliary_models[name]
    return EngineModel(
        path=spec.path,
        url=spec.engine_url,
        max_model_len=spec.max_model_len,
        max_tokens=spec.max_tokens,
        tensor_parallel_size=spec.tensor_model_parallel_size,
        seed=config.trainer_common.seed,
    )


def judge_engine_model(config: AstunerConfig) -> EngineModel | None:
    """The judging model `task_judge.alien_llm_model` names (None: unset), with its reply budget."""
    judge = config.task_judge
    if not judge.alien_llm_model:
        return None
    return EngineModel(
        path=judge.alien_llm_model,
        max_tokens=judge.alien_llm_response_length,
        seed=config.trainer_common.seed,
    )


def _services(
    config: AstunerConfig, plugins: Plugins, run_folder: Path | None
) -> dict[str, Callable[[], Any]]:
    """The named services a factory may declare, each made only when one does."""
    paths = config.search_paths()
    return {
        "engines": lambda: Engines(plugins, paths),
        "judge_model": lambda: judge_engine_model(config),
        "run_folder": lambda: run_folder,
        "settings_of": lambda: (
            lambda kind, name: plugin_settings(config, plugins.get(kind, name, search_paths=paths))
        ),
        "workflow_source": lambda: WorkflowSource(
            name=config.rollout.agentscope_workflow or "",
            search_paths=tuple(str(p.resolve()) for p in paths),
            rollout_timeout=config.rollout.rollout_timeout,
        ),
    }


def build(
    config: AstunerConfig, plugins: Plugins, kind: str, name: str, *, run_folder: Path | None = None
) -> Any:
    """Find `name` among plugins of `kind` (or import it) and build it with its settings.

    The factory gets its validated settings block, and, by keyword, each of
    the named services (`engines`, `judge_model`, `run_folder`,
    `settings_of`, `workflow_source`) whose name its signature declares:
    never the whole config.
    """
    reg = plugins.get(kind, name, search_paths=config.search_paths())
    return _call(reg, plugin_settings(config, reg), _services(config, plugins, run_folder))


def build_companion(
    config: AstunerConfig, plugins: Plugins, reg: Registration, value: str | None, run_folder: Path
) -> Any:
    """Companion `reg` as `--with-NAME value` asks: `factory(value, **the services it names)`."""
    return _call(reg, None, _services(config, plugins, run_folder), value)


def _call(
    reg: Registration, settings: BaseModel | None, services: Mapping[str, Callable[[], Any]], *args: Any
) -> Any:
    """`reg`'s factory called with its settings (if it has a model), `args`, and the services it declares."""
    wanted = {key: make() for key, make in services.items() if _accepts(reg.factory, key)}
    if reg.settings is None:
        return reg.factory(*args, **wanted)
    return reg.factory(settings if settings is not None else reg.settings(), *args, **wanted)


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
    if LOCAL_ENGINE in plugins.registry("engine"):
        return LOCAL_ENGINE
    raise PluginError(
        f"{section}.engine is 'auto' but no local engine is installed and {section}.engine_url is not "
        f"set. Install astuner-backbone-torch (engine 'transformers'), point {section}.engine_url "
        f"at a vLLM server, or set {section}.engine to an installed engine "
        f"({', '.join(sorted(plugins.registry('engine'))) or 'none'})."
    )


@dataclass(frozen=True)
class RunUses:
    """What a command's work uses of the config, so that `preflight` checks that and nothing else.

    `splits`: the reader splits it reads (their files must exist; empty: it
    builds no reader, as `astuner sft`, which reads `--from`). `workflow`: it
    runs the workflow and the judge (both must load, the judge's settings be
    valid). `engine`: it generates through `rollout.engine` on this machine
    (that engine must be installed). `model`: who loads `model.path`:
    `"engine"` this machine when that engine is the local one (a server may
    hold a folder this machine has not), `"here"` this process whatever the
    engine (a trainer, `astuner sft`), `"elsewhere"` remote workers (verl,
    Trinity): never checked on this machine. The default is what `astuner
    run` may use at most; a backbone says what it uses with `run_uses`
    (`astuner.protocols.DeclaresRunUses`), a command passes its own to
    `runs.open(config, command=..., uses=...)`:

    ```python
    from astuner.training import RunUses

    # a command that trains on a file of its own: no reader, no workflow, no engine
    TRAINS_ON_A_FILE = RunUses(splits=frozenset(), workflow=False, engine=False, model="here")
    ```
    """

    splits: frozenset[str] = field(default_factory=lambda: frozenset({"train", "validation"}))
    workflow: bool = True
    engine: bool = True
    model: Literal["engine", "here", "elsewhere"] = "engine"


def run_uses(backbone: object, config: AstunerConfig) -> RunUses:
    """What a run of `backbone` uses: its own answer (`run_uses(config)`), else everything `RunUses` names."""
    from astuner.protocols import DeclaresRunUses

    return backbone.run_uses(config) if isinstance(backbone, DeclaresRunUses) else RunUses()


def _check_before_run(check: Callable[..., object], splits: frozenset[str]) -> None:
    """Call a settings block's `check_before_run` with the splits read, or with nothing when it takes
    nothing: the form a plugin wrote before splits were passed (`check_before_run(self)`) still runs."""
    try:
        takes_splits = bool(inspect.signature(check).parameters)
    except (TypeError, ValueError):  # no signature to read (a builtin): call it as first documented
        takes_splits = False
    if takes_splits:
        check(splits)
    else:
        check()


def preflight(config: AstunerConfig, plugins: Plugins, uses: RunUses | None = None) -> None:
    """Check what would fail the run in its first seconds, before its folder is made.

    A run that fails here leaves no folder behind and its error is printed
    once, by whoever catches it. Checked, of what the command `uses` (default:
    all a run may use): the reader's settings and what its block checks
    beyond itself (its `check_before_run(splits)`, e.g. that the files of
    the splits read exist; a `check_before_run()` that takes no splits is
    called with none), the judge's and the workflow's, that the engine
    `rollout.engine` names is installed, and `model.path` where this machine
    loads it. Nothing is built: a plugin is built once, by the run.
    """
    uses = uses if uses is not None else RunUses()
    for kind, key, name in _chosen_plugins(config):
        if not (uses.splits if kind == "reader" else uses.workflow):
            continue
        reg = _chosen_plugin(config, plugins, kind, key, name)
        check = getattr(plugin_settings(config, reg), "check_before_run", None)
        if callable(check):
            _check_before_run(check, uses.splits)
    if uses.workflow and config.rollout.agentscope_workflow:
        plugins.get("workflow", config.rollout.agentscope_workflow, config.search_paths())
    engine = _checked_engine(config, plugins) if uses.engine else None
    local = uses.model == "engine" and engine == LOCAL_ENGINE and not config.rollout.engine_url
    if uses.model == "here" or local:
        check_model_path(config.model.path, "model.path", config.path_of("model.path"))


def _checked_engine(config: AstunerConfig, plugins: Plugins) -> str | None:
    """The engine `rollout.engine` resolves to; a ConfigError naming the key if it names a missing one.

    None: `auto` finds no engine, which only a backbone that generates needs
    (one that brings its own, or trains on records, does not), so it says so
    itself when it asks for one.
    """
    try:
        if config.rollout.engine == "auto":
            return engine_name(config, plugins)
    except PluginError:
        return None
    try:
        plugins.get("engine", config.rollout.engine, search_paths=config.search_paths())
    except PluginError as exc:
        raise ConfigError(f"rollout.engine, from {_origin(config, 'rollout.engine')}: {exc}") from exc
    return config.rollout.engine


def check_model_path(path: str, key: str, written: ConfigPath | None = None) -> None:
    """Refuse an empty model path, and one that looks like a local path (not a hub id) but is not there.

    Hugging Face would take it for a hub id and fail with a message about
    repo-id characters; a hub id (`name`, `org/name`) and a `builtin:` are
    left to the loader. `written`: how a config made `path` absolute, to say
    what was written and from which folder it was taken.
    """
    from astuner.core.tokenizer import BUILTIN_PREFIX, SMOLLM2

    kinds = f"a model folder, a .gguf file, a Hugging Face hub id (org/name) or {BUILTIN_PREFIX}{SMOLLM2}"
    if not path.strip():
        raise ConfigError(f"{key} is empty. Set it to {kinds}.")
    if path.startswith(BUILTIN_PREFIX):
        return
    looks_local = path.startswith(("/", ".", "~")) or "\\" in path or path.count("/") > 1
    if (looks_local or path.endswith(".gguf")) and not Path(path).exists():
        shown = written if written is not None else path
        raise ConfigError(f"{missing_message(key, shown, 'local path')}. Set {key} to {kinds}.")


def build_engine(config: AstunerConfig, plugins: Plugins) -> Any:
    """The configured inference engine: its settings block, serving `main_engine_model(config)`."""
    reg = plugins.get("engine", engine_name(config, plugins), search_paths=config.search_paths())
    return _call(reg, plugin_settings(config, reg), {}, main_engine_model(config))


def check_auxiliary_models(config: AstunerConfig, plugins: Plugins) -> None:
    """Every `auxiliary_models` entry names an installed engine, with valid settings and tool parser."""
    for name in config.auxiliary_models:
        _auxiliary_engine(config, plugins, name)


def build_auxiliary_engine(config: AstunerConfig, plugins: Plugins, name: str) -> Any:
    """The engine of auxiliary model `name`: its entry's engine settings, serving that model alone."""
    reg, settings = _auxiliary_engine(config, plugins, name)
    return _call(reg, settings, {}, auxiliary_engine_model(config, name))


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
