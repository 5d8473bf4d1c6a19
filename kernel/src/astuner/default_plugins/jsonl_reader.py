"""Reader `jsonl`: tasks from JSON-lines files, one object per line."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from astuner.config_paths import missing_message
from astuner.core.task import Task
from astuner.errors import ConfigError
from astuner.hookspecs import Register, hookimpl
from astuner.protocols import Split


class JsonlReaderSettings(BaseModel):
    """`task_reader.jsonl`: where the files are and which fields mean what."""

    model_config = ConfigDict(extra="forbid")

    training_file: Path | None = Field(
        None, description="JSON-lines file of the train split; relative: from the config file's folder."
    )
    validation_file: Path | None = Field(
        None, description="JSON-lines file of the validation split; relative: from the config file's folder."
    )
    query_field: str = Field("question", description="Field holding what the agent is asked.")
    answer_field: str | None = Field(
        "answer", description="Field holding the reference answer; null if tasks have none."
    )
    id_field: str | None = Field(None, description="Field holding a task id; default: split-line.")

    def check_before_run(self, splits: Collection[str]) -> None:
        """The file of every split the run reads exists: asked before a run's folder is made.

        A split the run never reads is left alone: a training run that does
        not validate may name a validation file that is not there yet.
        """
        for split, key in (("train", "training_file"), ("validation", "validation_file")):
            path = getattr(self, key)
            if split in splits and path is not None:
                _existing(path, key)


class JsonlReader:
    def __init__(self, settings: JsonlReaderSettings) -> None:
        self.settings = settings

    def read(self, split: Split) -> Iterator[Task]:
        s = self.settings
        key = "training_file" if split == "train" else "validation_file"
        path = getattr(s, key)
        if path is None:
            raise ConfigError(
                f"task_reader.jsonl.{key} is not set, so there is no {split} split. "
                f"Set it to a JSON-lines file with one task per line."
            )
        _existing(path, key)
        with path.open("rb") as lines:
            for lineno, raw in enumerate(lines, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise ConfigError(
                        f"{path}, line {lineno}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at column "
                        f"{exc.start + 1}). Save the file as UTF-8."
                    ) from exc
                if not line.strip():
                    continue
                yield self._task(path, lineno, line, split)

    def _task(self, path: Path, lineno: int, line: str, split: Split) -> Task:
        s = self.settings
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}, line {lineno}: not valid JSON ({exc.msg}).") from exc
        if not isinstance(row, dict):
            raise ConfigError(f"{path}, line {lineno}: expected a JSON object, got {type(row).__name__}.")
        for role, field in (("query_field", s.query_field), ("answer_field", s.answer_field)):
            if field is not None and field not in row:
                raise ConfigError(
                    f"{path}, line {lineno}: no field '{field}' (task_reader.jsonl.{role}). "
                    f"The row has: {', '.join(sorted(row))}."
                )
        metadata = dict(row)
        if s.answer_field is not None:
            metadata["answer"] = row[s.answer_field]
        task_id = str(row[s.id_field]) if s.id_field and s.id_field in row else f"{split}-{lineno}"
        return Task(task_id=task_id, main_query=str(row[s.query_field]), metadata=metadata)


def _existing(path: Path, key: str) -> None:
    """A ConfigError naming `key`, what was written, where it led and how to fix it, unless a file."""
    if not path.is_file():
        raise ConfigError(
            f"{missing_message(f'task_reader.jsonl.{key}', path)}. Set it to a JSON-lines file with one "
            "task per line (a relative path in a config file is taken from the file's folder)."
        )


@hookimpl
def register_readers(register: Register) -> None:
    register(
        "jsonl",
        JsonlReader,
        settings=JsonlReaderSettings,
        summary="Tasks from JSON-lines files (training_file / validation_file).",
    )
