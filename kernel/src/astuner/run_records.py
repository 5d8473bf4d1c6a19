"""Reading one run's records folder: its status, settings, metrics, rollouts and what they trained.

A run writes `status.json`, `config.yaml`, `metrics.jsonl` and
`rollouts/*.jsonl` into its folder (`ExperimentDir`). `RunRecords` reads them
back for tools that show a run (the log viewer, a notebook), so that none of
them needs the kernel's record formats, its merging or its advantage code:
what such a tool shows as "trained" is built by the very code a backbone
trains with.

Records may come from anywhere (a colleague's folder, a download), so a
reader never follows a link out of its bounds: every file and folder is
resolved (symlinks followed) and used only if it lies inside the resolved
bounds; one that leads out reads exactly as one that does not exist.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from astuner.algorithms import advantage_estimator
from astuner.config_yaml import load_yaml
from astuner.core.health import run_health
from astuner.core.merge import merge_trajectory
from astuner.core.metric_catalog import MetricCatalog, metric_catalog
from astuner.core.tokenizer import BUILTIN_PREFIX, ChatTokenizer, load_tokenizer
from astuner.core.trajectory import Sample, Trajectory
from astuner.errors import ConfigError
from astuner.plugins import Plugins
from astuner.record import read_metrics
from astuner.record_lines import clipped_characters, load_trajectory
from astuner.run_status import STATUS_FILE, RunStatus, read_status

_STEP_FILE = re.compile(r"step_(\d+)\.jsonl$")
_TOKENIZER_FILES = ["*.json", "*.jinja", "*.model", "*.txt", "*.tiktoken"]


@dataclass(frozen=True)
class WhatTrained:
    """What training made of one trajectory (`RunRecords.what_trained`), as plain data.

    `samples`: the merged samples, each a `Sample`'s fields (`input_ids`,
    `loss_mask`, `old_logprobs`, `advantages`, `call_indices`,
    `response_spans`, `response_sampling`, `agent_name`, ...) plus
    `trained_tokens`, with the advantages filled in when they could be
    computed; `breaks`: the prefix breaks (`call`, `sample`, `previous_call`,
    `position`, `reason`, `message`, `role`) each with a sentence (`note`);
    `merge`: merging's counts (`calls`, `samples`, `tokens_trained`,
    `tokens_unmerged`, `drifts`); `advantages`: each trained call's advantage
    by call index; `step_advantages`: the trajectory's per-step advantages
    (None when not scored); `advantage_error`: why advantages could not be
    computed (None when they were); `clipped_characters`: characters its
    record did not keep.
    """

    trajectory: Trajectory
    estimator: str
    gamma: float
    group_size: int
    samples: list[dict[str, Any]]
    breaks: list[dict[str, Any]]
    merge: dict[str, int]
    advantages: dict[int, float] = field(default_factory=dict)
    step_advantages: list[float] | None = None
    zero_variance_groups: list[str] = field(default_factory=list)
    advantage_error: str | None = None
    clipped_characters: int = 0

    def zero_variance(self, agent: str | None = None) -> bool:
        """Whether the group had no reward variance, so these advantages are all zero.

        With `agent`: that agent's own group (judges that score agents on
        their own group them per agent). Without: the trajectory's group, or,
        with per-agent rewards, every agent that trained in it.
        """
        trajectory = self.trajectory
        if agent is not None:
            return f"{trajectory.group_id}/{agent}" in self.zero_variance_groups
        if not trajectory.agent_rewards:
            return trajectory.group_id in self.zero_variance_groups
        trained = {c.agent_name for c in trajectory.calls if c.index in self.advantages}
        return bool(trained) and all(self.zero_variance(name) for name in trained)


class RunRecords:
    """A reader's view of one run's records folder.

    `bounds` is the folder nothing may be read outside of (default: the run
    folder itself); a tool that shows many runs passes their common root, so
    that links between runs keep working while links out do not.

    `what_trained` returns a `WhatTrained`, plain data
    ready for a page: `samples` (each a `Sample`'s fields with advantages,
    plus `trained_tokens`), `breaks` (each prefix break with its sentence,
    `note`), `merge` counts, `advantages` by call index, `step_advantages`,
    `advantage_error`, `clipped_characters` and `zero_variance(agent=None)`.

    ```python
    from pathlib import Path

    from astuner.api import RunRecords

    records = RunRecords(Path("launcher_record/math/20260101-120000"))
    records.status().state            # "finished"
    records.config()["model"]["path"]
    for file in records.trajectory_files():
        with file.open("rb") as lines:
            first = RunRecords.read_trajectory(next(lines))
    trained = RunRecords.what_trained(first, [first], *records.advantage_settings())
    trained.samples[0]["loss_mask"], trained.advantages
    ```
    """

    def __init__(self, folder: Path, bounds: Path | None = None) -> None:
        self.folder = folder
        self.bounds = (bounds if bounds is not None else folder).resolve()

    def resolve(self, path: Path) -> Path | None:
        """`path` resolved (symlinks followed) if it exists inside the bounds, else None.

        A link out reads as a name that does not exist:

            RunRecords(root).resolve(root / "latest")  # None when `latest` links out of root
        """
        try:
            target = path.resolve()
            if target != self.bounds and self.bounds not in target.parents:
                return None
            return target if target.exists() else None
        except (OSError, RuntimeError):  # a symlink loop, a folder we may not read
            return None

    def file(self, name: str) -> Path | None:
        """The run's file `name` resolved, if it is a regular file inside the bounds.

        For example:

            records.file("astuner.log")  # None when missing, a folder, or a link out
        """
        target = self.resolve(self.folder / name)
        return target if target is not None and target.is_file() else None

    def is_run(self) -> bool:
        """Whether the folder holds a run's records: its `config.yaml` or a `rollouts/` folder.

        For example, the runs of one experiment folder:

            [p for p in root.iterdir() if RunRecords(p, root).is_run()]
        """
        rollouts = self.resolve(self.folder / "rollouts")
        return self.file("config.yaml") is not None or (rollouts is not None and rollouts.is_dir())

    def status(self) -> RunStatus:
        """The run's status (`state`, `reason`); `unknown` without a readable `status.json`.

        A run still marked running whose process is gone reads as killed:

            records.status().state  # running, finished, failed, killed or unknown
        """
        return read_status(self.folder) if self.file(STATUS_FILE) is not None else RunStatus("unknown")

    def config(self) -> dict[str, Any]:
        """The run's settings: the `astuner:` block of its `config.yaml` ({} when missing or unreadable).

        Read with the bounded YAML loader: a crafted `config.yaml` (an alias
        bomb) reads as missing instead of filling the memory.

            records.config().get("model", {}).get("path")
        """
        path = self.file("config.yaml")
        if path is None:
            return {}
        try:
            data = load_yaml(path.read_text(encoding="utf-8"), f"Config file '{path}'")
        except (OSError, ValueError, yaml.YAMLError, ConfigError):
            return {}
        block = data.get("astuner") if isinstance(data, dict) else None
        return block if isinstance(block, dict) else {}

    def metrics(self) -> list[dict[str, Any]]:
        """The rows of the run's `metrics.jsonl`, in order; lines that do not parse are skipped.

        A run in progress may be writing its last line, so one that does not
        parse is left out:

            [row["train/reward_mean"] for row in records.metrics() if "train/reward_mean" in row]
        """
        path = self.file("metrics.jsonl")
        return [] if path is None else read_metrics(path)

    def health(self, rows: Sequence[Mapping[str, Any]] | None = None) -> list[dict[str, Any]]:
        """Each health check the run's metrics crossed: `check`, `step` (the first step it fired
        at), `text` (its sentence there), `steps` (on how many steps it fired), `of` (how many
        steps trained), `acknowledged` (whether the run's config acknowledged it, its
        `health.acknowledged`: it held by the config's choice).

        The checks are the health rules the installed plugins declare (the
        kernel's among them). `rows` are the metrics rows already read
        (default: read them now), so that a caller showing both sees the
        health of the rows it shows:

            for warning in records.health():
                print(f"{warning['check']} on {warning['steps']} of {warning['of']} steps: {warning['text']}")
        """
        health = self.config().get("health")  # the run's own config.yaml, as written then
        listed = health.get("acknowledged") if isinstance(health, dict) else None
        names = [name for name in listed if isinstance(name, str)] if isinstance(listed, list) else []
        return run_health(self.metrics() if rows is None else rows, _installed_catalog(), names)

    @staticmethod
    def metric_declarations(keys: Iterable[str]) -> list[dict[str, Any]]:
        """What each metric key means, as the installed plugins declare it, in declaration order.

        Each entry: `key`, `label` (a person's name for it), `description`,
        `unit`, `good` ("up", "down" or None), `group` (the chart section),
        `split` (train, val, eval or None), `console`, `pattern` (the
        declared key) and `health` (its check's name or None). Keys nothing
        declares are left out:

            for metric in RunRecords.metric_declarations(records.metrics()[-1]):
                print(metric["label"], metric["unit"])
        """
        catalog = _installed_catalog()
        found = []
        for key in dict.fromkeys(keys):
            metric = catalog.lookup(key)
            if metric is not None:
                found.append((catalog.metrics.index(metric), metric.resolve(key)))
        return [resolved for _, resolved in sorted(found, key=lambda item: item[0])]

    def trajectory_files(self) -> list[Path]:
        """The run's rollout files: `step_<n>.jsonl` by step, then any other `.jsonl` (`debug`) by name.

        Each keeps its own name under the resolved `rollouts/` folder; a
        file that resolves outside the bounds is not listed.

            [RunRecords.step_of(f) for f in records.trajectory_files()]  # [1, 2, ..., None]
        """
        folder = self.resolve(self.folder / "rollouts")
        if folder is None or not folder.is_dir():
            return []
        try:
            names = [p for p in folder.iterdir() if p.suffix == ".jsonl"]
        except OSError:
            return []
        files = [p for p in names if (real := self.resolve(p)) is not None and real.is_file()]
        return sorted(files, key=lambda p: (self.step_of(p) is None, self.step_of(p) or 0, p.name))

    @staticmethod
    def step_of(file: Path) -> int | None:
        """The training step a rollout file holds (`step_12.jsonl` -> 12); None for `debug.jsonl` and others.

        For example:

            RunRecords.step_of(Path("rollouts/step_12.jsonl"))  # 12
        """
        match = _STEP_FILE.search(file.name)
        return int(match.group(1)) if match else None

    @staticmethod
    def read_trajectory(line: str | bytes) -> Trajectory:
        """The trajectory on one line of a rollout file, with the messages its record keeps once restored.

        Raises ValueError (pydantic's ValidationError is one) for a line
        that is not a trajectory.

            trajectory = RunRecords.read_trajectory(file.read_bytes().splitlines()[0])
        """
        return load_trajectory(line)

    @staticmethod
    def decoding_tokenizer(path: str) -> ChatTokenizer:
        """The tokenizer `path` names, loaded without touching the network, to decode records' token ids.

        `path` is a folder, a builtin (`builtin:...`) or a hub name already in
        the local HuggingFace cache; a tool showing records must work offline
        and answer at once, where asking the hub would stall on retries.
        Raises FileNotFoundError for a hub name that is not cached.

            RunRecords.decoding_tokenizer(records.config()["model"]["path"]).hf.decode([42])
        """
        if path.startswith(BUILTIN_PREFIX) or Path(path).expanduser().is_dir():
            return load_tokenizer(path)
        from huggingface_hub import snapshot_download

        try:
            folder = snapshot_download(path, local_files_only=True, allow_patterns=_TOKENIZER_FILES)
        except Exception as exc:
            raise FileNotFoundError(
                f"{path!r} is neither a folder nor a model in the local HuggingFace cache "
                f"({type(exc).__name__}); start the viewer with --tokenizer FOLDER"
            ) from None
        return load_tokenizer(folder)

    def advantage_settings(self) -> tuple[str, float]:
        """The advantage estimator and gamma the run trained with (`grpo` and 1.0 unless its config says).

        They are `trainer_common.algorithm.adv_estimator` and `rollout.gamma`.

            trained = RunRecords.what_trained(trajectory, group, *records.advantage_settings())
        """
        config = self.config()
        algorithm = (config.get("trainer_common") or {}).get("algorithm") or {}
        gamma = (config.get("rollout") or {}).get("gamma", 1.0)
        return str(algorithm.get("adv_estimator", "grpo")), float(gamma)

    @staticmethod
    def what_trained(
        trajectory: Trajectory,
        group: Sequence[Trajectory],
        estimator: str = "grpo",
        gamma: float = 1.0,
        plugins: Plugins | None = None,
    ) -> WhatTrained:
        """What training made of `trajectory`: its merged samples with advantages, and its prefix breaks.

        Samples are merged by the code every backbone merges with;
        advantages are computed over `group` (the trajectory and the other
        runs of its task) with the estimator named `estimator` among
        `plugins`' and `gamma`, as the trainer does for that group
        (`advantage_settings` gives the run's). A tool reading records
        outside a run (the log viewer) has no plugins at hand: without
        them, the estimator is found among every installed plugin's, loaded
        once per process. Advantages that cannot be computed (an unknown
        estimator, step rewards that do not match the steps) leave
        `advantage_error` set and the samples without them.

            trained = RunRecords.what_trained(trajectory, group, *records.advantage_settings())
            trained.merge["samples"], trained.advantages, trained.zero_variance()
        """
        # Imported here: advantages load numpy, and every plugin imports this module (through astuner.api).
        from astuner.core.advantages import compute_advantages

        samples, report = merge_trajectory(trajectory)
        scored: dict[str, Any] = {}
        try:
            fn = advantage_estimator(plugins if plugins is not None else _installed_plugins(), estimator)
            adv = compute_advantages(group, samples, estimator=fn, gamma=gamma)
        except (ConfigError, ValueError) as exc:
            scored["advantage_error"] = str(exc)
        else:
            samples = adv.samples or samples
            scored.update(
                advantages=_call_advantages(adv.samples),
                step_advantages=adv.step_advantages.get(trajectory.trajectory_id),
                zero_variance_groups=adv.zero_variance_groups,
            )
        return WhatTrained(
            trajectory=trajectory,
            estimator=estimator,
            gamma=gamma,
            group_size=len(group),
            samples=[_sample(s) for s in samples],
            breaks=[{**asdict(b), "note": b.describe()} for b in report.breaks],
            merge={
                "calls": report.calls,
                "samples": report.samples,
                "tokens_trained": report.tokens_trained,
                "tokens_unmerged": report.tokens_unmerged,
                "drifts": report.drifts,
            },
            clipped_characters=clipped_characters(trajectory),
            **scored,
        )


@cache
def _installed_plugins() -> Plugins:
    """Every installed plugin, for `what_trained` called without a run's plugins; loaded once."""
    return Plugins()


@cache
def _installed_catalog() -> MetricCatalog:
    """The metrics every installed plugin declares, for records read outside a run; built once."""
    return metric_catalog(_installed_plugins())


def _sample(sample: Sample) -> dict[str, Any]:
    return {**sample.model_dump(), "trained_tokens": sample.num_trained_tokens}


def _call_advantages(samples: Sequence[Sample]) -> dict[int, float]:
    """Each trained call's advantage by call index, read off its first generated token."""
    return {call: s.advantages[a] for s in samples for a, b, call in s.response_spans if b > a}
