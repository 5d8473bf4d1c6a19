"""Reader `huggingface_dat_repo`: tasks from a HuggingFace dataset, on the hub or on disk.

`dataset_path` is a local folder (see `astuner_reader_hf.local` for the
layouts understood) or, when no such folder exists, a hub id such as
`openai/gsm8k` with `dataset_name: main`. Rows stream by default, so a
large set never sits in memory; shuffling a stream uses a seeded buffer of
`shuffle_buffer_size` rows, shuffling a saved (memory-mapped) dataset is exact.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from astuner.api import ConfigError, Split, Task
from astuner_reader_hf.local import KEY, TEXT_BUILDERS, LocalDataset, check_utf8, find_local

_PATH_PREFIXES = ("/", "./", "../", "~", ".\\", "..\\")


class HfReaderSettings(BaseModel):
    """`task_reader.huggingface_dat_repo`."""

    model_config = ConfigDict(extra="forbid")

    dataset_path: str = Field(
        description="A local dataset folder (relative: from the config file's folder, or from the working "
        "directory when given with -o) or a hub id (openai/gsm8k).",
        # the marker of astuner.config_paths.LOCAL_OR_HUB: made absolute where a config file names a folder
        json_schema_extra={"astuner_path": "local path or hub id"},
    )
    dataset_name: str | None = Field(
        None, description="The dataset config (hub: 'main' of openai/gsm8k; local: a sub-folder)."
    )
    training_split: str = Field("train", description="Split read for training.")
    validation_split: str = Field("test", description="Split read for validation and debug runs.")
    query_field: str = Field("question", description="Column holding what the agent is asked.")
    answer_field: str | None = Field("answer", description="Column with the reference; null if none.")
    id_field: str | None = Field(None, description="Column with a task id; default '<split>-<row>'.")
    shuffle: bool = Field(False, description="Shuffle the rows (seeded).")
    seed: int = Field(0, description="Shuffle seed.")
    max_samples: int | None = Field(None, ge=1, description="Read at most this many rows per split.")
    streaming: bool = Field(True, description="Stream rows instead of loading the split into memory.")
    shuffle_buffer_size: int = Field(10_000, ge=1, description="Rows buffered when shuffling a stream.")


class HfReader:
    def __init__(self, settings: HfReaderSettings) -> None:
        self.settings = settings

    def read(self, split: Split) -> Iterator[Task]:
        s = self.settings
        name = s.training_split if split == "train" else s.validation_split
        rows: Iterable[dict[str, Any]] = self._open(name)
        if s.max_samples is not None:
            rows = itertools.islice(rows, s.max_samples)
        for index, row in enumerate(rows):
            if index == 0:
                self._check_fields(row, name)
            yield self._task(row, name, index)

    def _open(self, split: str) -> Any:
        """The rows of `split`: a `datasets` Dataset or IterableDataset, shuffled if asked."""
        import datasets

        s = self.settings
        path = Path(s.dataset_path).expanduser()
        if path.exists():
            dataset = self._open_local(find_local(path, s.dataset_name), split)
        elif s.dataset_path.startswith(_PATH_PREFIXES):
            raise ConfigError(
                f"{KEY}.dataset_path: the folder '{s.dataset_path}' does not exist: looked at "
                f"{path.absolute()} (a relative path in a config file is taken from the file's folder, one "
                f"given with -o from the working directory)."
            )
        else:
            dataset = self._open_hub(split)
        if s.shuffle:
            if isinstance(dataset, datasets.IterableDataset):
                return buffered_shuffle(dataset, s.shuffle_buffer_size, s.seed)
            return dataset.shuffle(seed=s.seed)
        return dataset

    def _open_local(self, local: LocalDataset, split: str) -> Any:
        import datasets

        if local.builder == "disk":
            saved = datasets.load_from_disk(str(local.folder))
            if isinstance(saved, datasets.DatasetDict):
                _check_split(split, list(saved), str(local.folder))
                return saved[split]
            _check_split(split, [self.settings.training_split], str(local.folder), single=True)
            return saved
        _check_split(split, list(local.files), str(local.folder))
        if local.builder in TEXT_BUILDERS:
            check_utf8(local.files[split])
        return datasets.load_dataset(
            local.builder,
            data_files={split: local.files[split]},
            split=split,
            streaming=self.settings.streaming,
        )

    def _open_hub(self, split: str) -> Any:
        import datasets

        s = self.settings
        where = f"'{s.dataset_path}'" + (f" (config '{s.dataset_name}')" if s.dataset_name else "")
        try:
            return datasets.load_dataset(s.dataset_path, s.dataset_name, split=split, streaming=s.streaming)
        except ConnectionError as exc:
            raise ConfigError(
                f"Could not reach the HuggingFace Hub for the dataset {where}: {exc}. Without hub access, "
                f"point {KEY}.dataset_path at a local copy: a folder of split files (train.jsonl, "
                f"test.jsonl, or *.parquet), or the folder that `astuner data download {s.dataset_path} "
                f"--path DIR` wrote on a machine with access (DIR/{s.dataset_path}"
                f"{'/' + s.dataset_name if s.dataset_name else ''})."
            ) from exc
        except FileNotFoundError as exc:
            raise ConfigError(
                f"{KEY}.dataset_path {where} is neither a local folder nor a dataset on the HuggingFace "
                f"Hub ({exc})."
            ) from exc
        except ValueError as exc:
            # `datasets` names the valid splits or configs in these messages.
            raise ConfigError(f"Cannot read split '{split}' of the hub dataset {where}: {exc}") from exc

    def _check_fields(self, row: dict[str, Any], split: str) -> None:
        s = self.settings
        for role, column in (("query_field", s.query_field), ("answer_field", s.answer_field)):
            if column is not None and column not in row:
                raise ConfigError(
                    f"{KEY}.{role} is '{column}', but split '{split}' of '{s.dataset_path}' has no such "
                    f"column. Its columns are: {', '.join(row)}."
                )

    def _task(self, row: dict[str, Any], split: str, index: int) -> Task:
        s = self.settings
        metadata = dict(row)
        if s.answer_field is not None:
            metadata["answer"] = row[s.answer_field]
        task_id = str(row[s.id_field]) if s.id_field and s.id_field in row else f"{split}-{index}"
        return Task(task_id=task_id, main_query=str(row[s.query_field]), metadata=metadata)


def buffered_shuffle(rows: Iterable[dict[str, Any]], buffer_size: int, seed: int) -> Iterator[dict[str, Any]]:
    """Rows in a seeded random order, holding at most `buffer_size` of them at once.

    Each incoming row replaces a random one of the buffer, which is emitted;
    the rest comes out shuffled at the end. (`IterableDataset.shuffle` does
    the same but pauses five seconds whenever a shuffled parquet stream ends.)
    """
    rng = random.Random(seed)
    buffer: list[dict[str, Any]] = []
    for row in rows:
        if len(buffer) < buffer_size:
            buffer.append(row)
            continue
        slot = rng.randrange(buffer_size)
        yield buffer[slot]
        buffer[slot] = row
    rng.shuffle(buffer)
    yield from buffer


def _check_split(split: str, available: list[str], where: str, single: bool = False) -> None:
    if split in available:
        return
    role = "training_split or validation_split"
    if single:
        raise ConfigError(
            f"'{where}' is a saved single-split dataset, so it is read only as split "
            f"'{available[0]}' ({KEY}.training_split); {KEY}.{role} asks for '{split}'. Save a "
            "DatasetDict with both splits, or point validation at another folder."
        )
    raise ConfigError(
        f"The dataset at '{where}' has no split '{split}' ({KEY}.{role}). "
        f"Available splits: {', '.join(sorted(available)) or 'none'}."
    )
