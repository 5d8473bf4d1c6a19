"""The Python API: `tune()` and its argument objects, shaped like the AgentScope Tuner's.

from astuner import AlgorithmConfig, DatasetConfig, TunerModelConfig, tune

result = tune(
    workflow_func=my_workflow,
    judge_func=my_judge,
    train_dataset=DatasetConfig(path="data/gsm8k", split="train", total_steps=2),
    model=TunerModelConfig(model_path="builtin:smollm2-135m-instruct", max_model_len=4096, max_tokens=512),
    algorithm=AlgorithmConfig(group_size=4, batch_size=4),
)
print(result.checkpoint)
"""

from astuner.tuner.algorithm import AlgorithmConfig
from astuner.tuner.dataset import DatasetConfig
from astuner.tuner.model import TunerModelConfig
from astuner.tuner.result import TuneResult
from astuner.tuner.tune import JudgeType, WorkflowType, tune, tune_config

__all__ = [
    "AlgorithmConfig",
    "DatasetConfig",
    "JudgeType",
    "TuneResult",
    "TunerModelConfig",
    "WorkflowType",
    "tune",
    "tune_config",
]
