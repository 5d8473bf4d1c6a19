"""`astuner.tune()`: train a workflow from Python, the way the AgentScope Tuner tutorial does.

`tune_config()` turns the arguments into the same `AstunerConfig` a YAML
file gives, through `astuner.config.load_config` (so mistakes read as they
do on the command line). `tune()` then runs the backbone as `astuner run`
does (`astuner.launch`, inside an `astuner.lifecycle.RunLifecycle`) and
reads the run back as a `TuneResult`.

Where values come from, lowest first: astuner's defaults; the defaults of
the objects passed (`AlgorithmConfig()` means group_size 8); the YAML file
at `config_path`; `ASTUNER__*` environment variables; what was given
explicitly (keyword arguments, and the fields set when building an object);
`overrides` (`["section.key=value"]`, as `astuner run -o`). So a YAML file
keeps every value the call does not state.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from astuner.components import check_plugin_blocks
from astuner.config import AUXILIARY_NAME, AstunerConfig, deep_merge, load_config
from astuner.errors import ConfigError
from astuner.launch import prepare_run
from astuner.plugins import Plugins
from astuner.translation import nest
from astuner.tuner.algorithm import AlgorithmConfig
from astuner.tuner.dataset import BLOCK, DatasetConfig, check_eval_dataset
from astuner.tuner.functions import TuneFunctions
from astuner.tuner.model import TunerModelConfig
from astuner.tuner.result import TuneResult

WorkflowType = Callable[..., Awaitable[Any]]
JudgeType = Callable[..., Awaitable[Any]]
T = TypeVar("T")

# monitor_type -> trainer_common.logger. Every run also writes metrics.jsonl.
MONITORS = {"tensorboard": ["console", "tensorboard"], "console": ["console"]}


def tune(
    *,
    workflow_func: WorkflowType,
    judge_func: JudgeType | None = None,
    train_dataset: DatasetConfig | None = None,
    eval_dataset: DatasetConfig | None = None,
    model: TunerModelConfig | None = None,
    auxiliary_models: dict[str, TunerModelConfig] | None = None,
    algorithm: AlgorithmConfig | None = None,
    backbone: str | None = None,
    project_name: str | None = None,
    experiment_name: str | None = None,
    monitor_type: str | None = None,
    config_path: str | Path | None = None,
    overrides: list[str] | None = None,
    plugins: Plugins | None = None,
) -> TuneResult:
    """Train `workflow_func` (judged by `judge_func`) and return the run's folder, metrics and checkpoint.

    `workflow_func` is `async def workflow(task, model, auxiliary_models=None)`
    (or a `Workflow`), `judge_func` is `async def judge(task, response,
    auxiliary_models=None)`; without one, the config's judge decides (by
    default `exact`, which honours a reward the workflow returned). `backbone`
    is `torch` unless `config_path` names another; `debug` runs the workflow
    on the first tasks without training. `auxiliary_models` names models the
    workflow and judge call but that are not trained (an LLM judge, other
    agents): each reaches both functions as a model handle in their
    `auxiliary_models` argument. `experiment_name` defaults to the YAML
    file's name, else the workflow's. `plugins` is the plugin manager
    (default: everything installed). See `tune_config` for the rest.
    """
    config = tune_config(
        workflow_func=workflow_func,
        judge_func=judge_func,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        model=model,
        auxiliary_models=auxiliary_models,
        algorithm=algorithm,
        backbone=backbone,
        project_name=project_name,
        experiment_name=experiment_name,
        monitor_type=monitor_type,
        config_path=config_path,
        overrides=overrides,
    )
    functions = TuneFunctions(workflow_func, judge_func)
    plugins = plugins if plugins is not None else Plugins()
    plugins.add(functions, name=functions.plugin_name)
    try:
        plugins.check_conflicts()
        check_plugin_blocks(config, plugins)
        prepared = prepare_run(config, plugins)
        prepared.execute()  # which closes the run's log file when it ends
    finally:
        plugins.remove(functions.plugin_name)
    return TuneResult.read(prepared.experiment, prepared.lifecycle.checkpoint)


def tune_config(
    *,
    workflow_func: WorkflowType,
    judge_func: JudgeType | None = None,
    train_dataset: DatasetConfig | None = None,
    eval_dataset: DatasetConfig | None = None,
    model: TunerModelConfig | None = None,
    auxiliary_models: dict[str, TunerModelConfig] | None = None,
    algorithm: AlgorithmConfig | None = None,
    backbone: str | None = None,
    project_name: str | None = None,
    experiment_name: str | None = None,
    monitor_type: str | None = None,
    config_path: str | Path | None = None,
    overrides: list[str] | None = None,
) -> AstunerConfig:
    """The resolved config `tune()` runs with these arguments (the functions are checked, nothing runs).

    `train_dataset` / `eval_dataset` set the reader (`DatasetConfig`),
    `model` the model and its sampling (`TunerModelConfig`), `algorithm` the
    algorithm and step sizes (`AlgorithmConfig`); `monitor_type` is
    `tensorboard` or `console`. `auxiliary_models` maps names to
    `TunerModelConfig`s of untrained models (config key
    `auxiliary_models.<name>`, served by engine `auto` unless the YAML file
    or `overrides` choose another).
    """
    functions = TuneFunctions(workflow_func, judge_func)
    train = _expect(train_dataset, DatasetConfig, "train_dataset")
    evaluation = _expect(eval_dataset, DatasetConfig, "eval_dataset")
    tuned = _expect(model, TunerModelConfig, "model")
    chosen = _expect(algorithm, AlgorithmConfig, "algorithm")
    auxiliary = _auxiliary(auxiliary_models)
    defaults: dict[str, Any] = {"backbone": "torch", "trainer_common": {"logger": MONITORS["tensorboard"]}}
    arguments: dict[str, Any] = functions.config()
    if config_path is None:
        defaults["experiment_name"] = getattr(workflow_func, "__name__", type(workflow_func).__name__)
    parts: list[tuple[dict[str, Any], dict[str, Any]]] = []
    if train is not None:
        parts.append((train.training_config(explicit=False), train.training_config(explicit=True)))
        if evaluation is None:
            parts.append((nest({f"{BLOCK}.validation_split": train.split}), {}))
    if evaluation is not None:
        parts.append(
            (evaluation.validation_config(explicit=False), evaluation.validation_config(explicit=True))
        )
    for settings in (tuned, chosen):
        if settings is not None:
            parts.append((settings.config(explicit=False), settings.config(explicit=True)))
    for name, settings in auxiliary.items():
        parts.append(
            (settings.auxiliary_config(name, explicit=False), settings.auxiliary_config(name, explicit=True))
        )
    for under, over in parts:
        defaults, arguments = deep_merge(defaults, under), deep_merge(arguments, over)
    given = {"backbone": backbone, "project_name": project_name, "experiment_name": experiment_name}
    arguments.update({key: value for key, value in given.items() if value is not None})
    if monitor_type is not None:
        arguments = deep_merge(arguments, {"trainer_common": {"logger": _logger(monitor_type)}})
    config = load_config(config_path, overrides, defaults=defaults, arguments=arguments)
    if evaluation is not None:
        check_eval_dataset(config.task_reader, evaluation)
    functions.check(config.backbone, config.rollout.executor)
    return config


def _expect(value: Any, cls: type[T], argument: str) -> T | None:
    if value is None or isinstance(value, cls):
        return value
    raise ConfigError(
        f"tune({argument}=...) takes a {cls.__name__}, not a {type(value).__name__}: "
        f"write {argument}={cls.__name__}(...)."
    )


def _auxiliary(models: dict[str, TunerModelConfig] | None) -> dict[str, TunerModelConfig]:
    """`tune(auxiliary_models=...)`, checked: names fit config keys, values are `TunerModelConfig`s."""
    if models is None:
        return {}
    if not isinstance(models, dict):
        raise ConfigError(
            f"tune(auxiliary_models=...) takes a dict of names to TunerModelConfig, not a "
            f"{type(models).__name__}: write auxiliary_models={{'judge': TunerModelConfig(...)}}."
        )
    for name, settings in models.items():
        if not isinstance(name, str) or not AUXILIARY_NAME.fullmatch(name):
            raise ConfigError(
                f"tune(auxiliary_models=...): the name {name!r} must start with a letter or _ and hold "
                "only letters, digits, _ and - (it becomes the config key auxiliary_models.<name>)."
            )
        if not isinstance(settings, TunerModelConfig):
            raise ConfigError(
                f"tune(auxiliary_models={{{name!r}: ...}}) takes a TunerModelConfig, not a "
                f"{type(settings).__name__}: write {{{name!r}: TunerModelConfig(model_path=..., "
                "max_model_len=...)}."
            )
    return models


def _logger(monitor_type: str) -> list[str]:
    if monitor_type not in MONITORS:
        raise ConfigError(
            f"tune(monitor_type={monitor_type!r}): choose one of {', '.join(MONITORS)}. Every run writes "
            "metrics.jsonl; with 'tensorboard' also TensorBoard events. For verl or Trinity, set the "
            "engine's own monitor in its verl:/trinity: block."
        )
    return MONITORS[monitor_type]
