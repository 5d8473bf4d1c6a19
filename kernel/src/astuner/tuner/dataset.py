"""`DatasetConfig`: a task set in HuggingFace datasets form, as the AgentScope Tuner names it.

It is read by the `huggingface_dat_repo` reader (plugin `astuner-reader-hf`):
a local folder of split files (`train.jsonl`, `test.jsonl`, parquet, ...), a
`save_to_disk` folder, or a hub id.

| field | config key |
|---|---|
| `path`, `name` | `task_reader.huggingface_dat_repo.dataset_path`, `.dataset_name` |
| `split` | `.training_split` (as `train_dataset`) or `.validation_split` (as `eval_dataset`) |
| `query_field`, `answer_field` | `.query_field`, `.answer_field` |
| `total_epochs` | `trainer_common.total_epochs` (`train_dataset` only) |
| `total_steps` | `trainer_common.total_training_steps` (`train_dataset` only) |

The reader holds one dataset with a training and a validation split, so
`eval_dataset` names the same `path` (and `name`) as the training data, with
its own `split`. Without an `eval_dataset`, validation and debug runs read the
training split.
"""

from __future__ import annotations

import itertools
import json
from typing import Any

from pydantic import Field

from astuner.components import build_reader
from astuner.config import deep_merge, load_config
from astuner.config_sections import TaskReaderConfig
from astuner.errors import ConfigError
from astuner.plugins import Plugins
from astuner.tuner.settings import TunerSettings

READER = "huggingface_dat_repo"
BLOCK = f"task_reader.{READER}"

TRAINING_KEYS = {
    "path": f"{BLOCK}.dataset_path",
    "name": f"{BLOCK}.dataset_name",
    "split": f"{BLOCK}.training_split",
    "query_field": f"{BLOCK}.query_field",
    "answer_field": f"{BLOCK}.answer_field",
    "total_epochs": "trainer_common.total_epochs",
    "total_steps": "trainer_common.total_training_steps",
}
VALIDATION_KEYS = {"split": f"{BLOCK}.validation_split"}


class DatasetConfig(TunerSettings):
    """A task set: a dataset folder or hub id, its config name and split."""

    path: str = Field(description="A dataset folder (relative to the working directory) or a hub id.")
    name: str | None = Field(None, description="The dataset's config (hub) or sub-folder (local).")
    split: str = Field("train", description="The split to read.")
    query_field: str = Field("question", description="The column the agent is asked (Task.main_query).")
    answer_field: str | None = Field("answer", description="The column with the reference answer, if any.")
    total_epochs: int = Field(1, ge=1, description="Passes over the training split.")
    total_steps: int | None = Field(None, ge=1, description="Training steps; overrides total_epochs.")

    def training_config(self, *, explicit: bool) -> dict[str, Any]:
        """The config values this object sets as `train_dataset`."""
        values = self.config_values(TRAINING_KEYS, explicit=explicit)
        return deep_merge(values, {"task_reader": {"type": READER}})

    def validation_config(self, *, explicit: bool) -> dict[str, Any]:
        """The config values this object sets as `eval_dataset` (its split; the path is checked)."""
        return self.config_values(VALIDATION_KEYS, explicit=explicit)

    def preview(self, n: int = 5) -> list[dict[str, Any]]:
        """Print the first `n` rows of the split as JSON and return them, read as training will read them."""
        config = load_config(None, environ={}, defaults=self.training_config(explicit=False))
        reader = build_reader(config, Plugins())
        rows = [task.metadata for task in itertools.islice(reader.read("train"), n)]
        print(json.dumps(rows, indent=2, ensure_ascii=False, default=str))
        return rows


def check_eval_dataset(task_reader: TaskReaderConfig, eval_dataset: DatasetConfig) -> None:
    """`eval_dataset` must name the dataset the training tasks come from (another split of it): those of
    `task_reader`, the config's block of that name."""
    block = (task_reader.model_extra or {}).get(READER) or {}
    training = (block.get("dataset_path"), block.get("dataset_name"))
    if task_reader.type == READER and training == (eval_dataset.path, eval_dataset.name):
        return
    source = _named(*training) if task_reader.type == READER else f"reader '{task_reader.type}'"
    raise ConfigError(
        f"eval_dataset reads {_named(eval_dataset.path, eval_dataset.name)}, but the training tasks come "
        f"from {source}. astuner reads training and evaluation tasks from two splits of one dataset: give "
        "eval_dataset the training data's path (and name) with its own split, e.g. "
        f"DatasetConfig(path={training[0] or eval_dataset.path!r}, split='test')."
    )


def _named(path: str | None, name: str | None) -> str:
    return f"'{path}'" + (f" (name {name!r})" if name else "")
