"""`tune_config()`: the arguments of `astuner.tune()` become the config a YAML file would give."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from tuner_parts import answer, exact

from astuner import AlgorithmConfig, DatasetConfig, TunerModelConfig
from astuner.config import load_config
from astuner.errors import ConfigError
from astuner.tuner import tune_config


def tutorial_arguments(dataset_dir: Path) -> dict:
    return {
        "workflow_func": answer,
        "judge_func": exact,
        "train_dataset": DatasetConfig(path=str(dataset_dir), split="train", total_steps=2),
        "eval_dataset": DatasetConfig(path=str(dataset_dir), split="test"),
        "model": TunerModelConfig(
            model_path="builtin:smollm2-135m-instruct", max_model_len=2048, max_tokens=64
        ),
        "algorithm": AlgorithmConfig(group_size=4, batch_size=4),
    }


def test_the_objects_give_the_same_config_as_the_equivalent_yaml(dataset_dir: Path, tmp_path: Path) -> None:
    reader = {
        "dataset_path": str(dataset_dir),
        "dataset_name": None,
        "training_split": "train",
        "validation_split": "test",
        "query_field": "question",
        "answer_field": "answer",
    }
    block = {
        "backbone": "torch",
        "experiment_name": "answer",
        "model": {"path": "builtin:smollm2-135m-instruct"},
        "task_reader": {"type": "huggingface_dat_repo", "huggingface_dat_repo": reader},
        "task_judge": {"judge_protocol": "tune/tuner_parts.exact"},
        "data": {"train_batch_size": 4},
        "rollout": {
            "agentscope_workflow": "tune/tuner_parts.answer",
            "num_repeat": 4,
            "max_model_len": 2048,
            "temperature": 1.0,
            "top_p": 1.0,
            "max_response_length_in_one_turn": 64,
            "tensor_model_parallel_size": 1,
            "n_vllm_engine": 1,
        },
        "context_tracker": {"tool_parser": "hermes"},
        "trainer_common": {
            "total_epochs": 1,
            "total_training_steps": 2,
            "save_freq": 100,
            "test_freq": 100,
            "logger": ["console", "tensorboard"],
            "algorithm": {"adv_estimator": "grpo"},
            "optim": {"lr": 1e-6},
        },
    }
    path = tmp_path / "same.yaml"
    path.write_text(yaml.safe_dump({"astuner": block}), encoding="utf-8")
    from_yaml = load_config(path)
    from_objects = tune_config(**tutorial_arguments(dataset_dir))
    assert from_objects.model_dump() == from_yaml.model_dump()
    assert from_objects.source is None


def test_yaml_keeps_what_the_call_does_not_state(dataset_dir: Path, tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "base.yaml"
    block = {
        "backbone": "debug",
        "project_name": "from_yaml",
        "rollout": {"temperature": 0.7, "num_repeat": 3, "top_p": 0.9},
        "data": {"train_batch_size": 5},
        "trainer_common": {"optim": {"lr": 3e-5}},
    }
    path.write_text(yaml.safe_dump({"astuner": block}), encoding="utf-8")
    monkeypatch.setenv("ASTUNER__ROLLOUT__TOP_P", "0.5")
    config = tune_config(
        workflow_func=answer,
        model=TunerModelConfig(model_path="other-model", max_model_len=16384),
        algorithm=AlgorithmConfig(group_size=6),
        config_path=path,
        overrides=["data.train_batch_size=9"],
    )
    assert config.rollout.num_repeat == 6  # given explicitly: beats the file
    assert config.model.path == "other-model" and config.rollout.max_model_len == 16384
    assert config.rollout.temperature == 0.7  # TunerModelConfig's default 1.0 does not clobber the file
    assert config.trainer_common.optim.lr == 3e-5  # nor does AlgorithmConfig's 1e-6
    assert config.rollout.top_p == 0.5  # the environment beats the file
    assert config.data.train_batch_size == 9  # overrides beat everything
    assert config.backbone == "debug" and config.project_name == "from_yaml"
    assert config.experiment_name == "base"  # the YAML file's stem, as with `astuner run`
    assert config.rollout.agentscope_workflow == "tune/tuner_parts.answer"

    explicit = tune_config(
        workflow_func=answer,
        model=TunerModelConfig(model_path="m", max_model_len=16384, temperature=0.2, top_p=1.0),
        backbone="torch",
        experiment_name="mine",
        config_path=path,
    )
    assert explicit.rollout.temperature == 0.2 and explicit.rollout.top_p == 1.0  # over file and env
    assert explicit.backbone == "torch" and explicit.experiment_name == "mine"


def test_without_a_file_the_objects_defaults_apply(dataset_dir: Path) -> None:
    config = tune_config(
        workflow_func=answer,
        train_dataset=DatasetConfig(path=str(dataset_dir)),
        model=TunerModelConfig(model_path="m", max_model_len=16384),
        algorithm=AlgorithmConfig(),
    )
    assert (config.rollout.num_repeat, config.data.train_batch_size) == (8, 32)
    assert (config.rollout.temperature, config.rollout.max_response_length_in_one_turn) == (1.0, 8192)
    assert config.backbone == "torch" and config.experiment_name == "answer"
    assert config.trainer_common.total_epochs == 1
    # no eval_dataset: validation and debug runs read the training split
    reader = config.task_reader.model_extra["huggingface_dat_repo"]
    assert reader["training_split"] == reader["validation_split"] == "train"
    assert config.task_judge.judge_protocol == "exact"  # no judge_func: the config's judge decides


def test_monitor_type_sets_the_loggers() -> None:
    assert tune_config(workflow_func=answer, monitor_type="console").trainer_common.logger == ["console"]
    with pytest.raises(
        ConfigError, match=r"tune\(monitor_type='wandb'\): choose one of tensorboard, console"
    ):
        tune_config(workflow_func=answer, monitor_type="wandb")


async def wrong_name(task: dict, llm) -> None: ...


async def extra_param(task: dict, model, auxiliary_models=None, retries=3) -> None: ...


def blocking(task: dict, model) -> None: ...


async def judge_with_output(task: dict, output) -> None: ...


@pytest.mark.parametrize(
    ("workflow", "judge", "expected"),
    [
        (
            wrong_name,
            None,
            r"The workflow wrong_name\(task, llm\) has the wrong parameters: it must be async def "
            r"workflow\(task, model, auxiliary_models=None\)\. Missing: model\. Not allowed: llm\.",
        ),
        (extra_param, None, r"extra_param\(task, model, auxiliary_models, retries\).*Not allowed: retries\."),
        (blocking, None, r"The workflow blocking must be declared with 'async def'"),
        (
            answer,
            judge_with_output,
            r"The judge judge_with_output\(task, output\) has the wrong parameters: it must be async def "
            r"judge\(task, response, auxiliary_models=None\)\. Missing: response\. Not allowed: output\.",
        ),
        (
            "my_module->answer",
            None,
            r"tune\(workflow_func='my_module->answer'\): pass the function itself, not its name",
        ),
    ],
)
def test_functions_with_the_wrong_shape_fail_before_anything_runs(workflow, judge, expected: str) -> None:
    with pytest.raises(ConfigError, match=expected):
        tune_config(workflow_func=workflow, judge_func=judge)


def test_unknown_algorithm_and_bad_arguments_are_named() -> None:
    with pytest.raises(ConfigError, match=r"AlgorithmConfig\(algorithm_type='foo'\): astuner has no such"):
        AlgorithmConfig(algorithm_type="foo")
    with pytest.raises(ConfigError, match=r"no argument 'group_sise'\. Did you mean 'group_size'\?"):
        AlgorithmConfig(group_sise=4)
    with pytest.raises(ConfigError, match=r"TunerModelConfig needs the argument 'max_model_len'"):
        TunerModelConfig(model_path="m")
    with pytest.raises(ConfigError, match=r"TunerModelConfig\(top_p=1\.5\): Input should be less than"):
        TunerModelConfig(model_path="m", max_model_len=10, top_p=1.5)
    with pytest.raises(ConfigError, match=r"TunerModelConfig\(tool_call_parser='xml'\): no such"):
        TunerModelConfig(model_path="m", max_model_len=10, tool_call_parser="xml")
    with pytest.raises(ConfigError, match=r"tune\(algorithm=\.\.\.\) takes a AlgorithmConfig, not a dict"):
        tune_config(workflow_func=answer, algorithm={"group_size": 4})
    with pytest.raises(ConfigError, match=r"'project_name' in the arguments of astuner\.tune\(\)"):
        tune_config(workflow_func=answer, project_name=5)
    assert AlgorithmConfig(algorithm_type="rloo").config(explicit=True) == {
        "trainer_common": {"algorithm": {"adv_estimator": "rloo"}}
    }


def test_what_astuner_cannot_do_from_python_is_refused(dataset_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(ConfigError, match=r"eval_dataset reads '.*other', but the training tasks come from"):
        tune_config(
            workflow_func=answer,
            train_dataset=DatasetConfig(path=str(dataset_dir)),
            eval_dataset=DatasetConfig(path=str(other), split="test"),
        )
    with pytest.raises(ConfigError, match=r"rollout.executor is 'ray'.*tune/tuner_parts.answer"):
        tune_config(workflow_func=answer, overrides=["rollout.executor=ray"])
    with pytest.raises(ConfigError, match=r"backbone 'verl' runs each workflow in its engine's worker"):
        tune_config(workflow_func=answer, backbone="verl")
