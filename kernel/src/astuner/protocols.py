"""The shapes of the things plugins register, and the optional capabilities they may have.

Factories registered through the hooks in `astuner.hookspecs` return
objects of these shapes. They are protocols: any class with the right
methods qualifies, no base class needed.

An optional capability (a reader that also makes environments, a judge that
scores whole rollouts, ...) is a runtime-checkable protocol as well: the
kernel asks `isinstance(obj, Capability)`, never `getattr(obj, "name")`, so
every such contract is declared, documented and importable from `astuner.api`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from astuner.core.task import JudgeOutput, Task, WorkflowOutput, WorkflowTask

if TYPE_CHECKING:
    from astuner.components import RunUses
    from astuner.config import AstunerConfig
    from astuner.plugins import NotReady, Plugins
    from astuner.record import ExperimentDir
    from astuner.rollout.model_tuner import ModelTuner
    from astuner.rollout.runner import RolloutRunner

Split = Literal["train", "validation"]


@runtime_checkable
class TaskReader(Protocol):
    """Yields the tasks of one split, in a stable order.

    ```python
    from collections.abc import Iterator

    from astuner.api import Split, Task, TaskReader


    class Sums:
        def read(self, split: Split) -> Iterator[Task]:
            for a in range(10) if split == "train" else range(10, 12):
                yield Task(task_id=f"sum-{a}", main_query=f"{a} + {a} = ?", metadata={"answer": str(2 * a)})


    assert isinstance(Sums(), TaskReader)
    ```
    """

    def read(self, split: Split) -> Iterator[Task]: ...


@runtime_checkable
class Judge(Protocol):
    """Turns one run's outcome into a reward.

    ```python
    from astuner.api import Judge, JudgeOutput, Task, WorkflowOutput


    class ExactAnswer:
        async def judge(self, task: Task, output: WorkflowOutput) -> JudgeOutput:
            right = (output.response_text or "").strip() == task.answer
            return JudgeOutput(reward=float(right), is_success=right)


    assert isinstance(ExactAnswer(), Judge)
    ```
    """

    async def judge(self, task: Task, output: WorkflowOutput) -> JudgeOutput: ...


@dataclass
class RunContext:
    """Everything a backbone gets for one `astuner run`."""

    config: AstunerConfig
    experiment: ExperimentDir
    plugins: Plugins
    with_ray: bool = False


@runtime_checkable
class Backbone(Protocol):
    """Runs (and usually trains) with the resolved config."""

    def run(self, ctx: RunContext) -> None: ...


@runtime_checkable
class WorkflowExecutor(Protocol):
    """Where the workflows of a `RolloutRunner` run (`rollout.executor`) when not in its own event loop.

    `session(runner)` is entered once around each `runner.run()`, before
    any rollout starts: connect to a cluster, or serve the gateway where
    remote workers reach it by setting `runner.gateway` (restored on exit).
    `run_workflow(runner, workflow_task, tuner)` runs one rollout's workflow
    (`runner.workflow`, loaded by the config's name for it) and returns its
    output; it is also called without a session, by `runner.run_one()` in
    verl and Trinity workers. `tuner` is the rollout's recording model
    handle, served by `runner.gateway` at `tuner.gateway_url` under
    `tuner.rollout_id`; the runner keeps it, the engine, the judge and the
    madness checks. `runner.gym_env_factory` is set when each task needs an
    environment of its own. The call runs under `rollout.rollout_timeout` and
    is cancelled when that passes; what it raises fails that rollout only.
    """

    def session(self, runner: RolloutRunner) -> AbstractAsyncContextManager[None]: ...

    async def run_workflow(
        self, runner: RolloutRunner, workflow_task: WorkflowTask, tuner: ModelTuner
    ) -> WorkflowOutput: ...


@runtime_checkable
class FindsCheckpoints(Protocol):
    """A `Backbone` that can find its own checkpoints: their layout is the backbone's, not the kernel's.

    `latest_checkpoint(runs)` returns the newest complete checkpoint written
    in any of `runs` (run folders, `<experiment_dir>/<experiment>/<time>/`)
    as a folder `astuner eval --checkpoint` takes, or None. A run's closing
    lines, `tune()`'s result and `astuner eval --checkpoint latest` ask it.
    """

    def latest_checkpoint(self, runs: Iterable[Path]) -> Path | None: ...


@runtime_checkable
class ProvidesGymEnvs(Protocol):
    """A `TaskReader` whose tasks live in an environment, so every run needs its own.

    `gym_env_factory()` is called once per rollout stack. What it returns is
    called once per run with that run's `Task` and gives (or awaits to) the
    run's environment, which the workflow sees as `workflow_task.gym_env`;
    the environment's `aclose()` (or `close()`) is called when the run ends.
    """

    def gym_env_factory(self) -> Callable[[Task], Any]: ...


@runtime_checkable
class JudgesWholeRollouts(Protocol):
    """A `Judge` that needs the whole rollout, not just its task: the run's environment, auxiliary models.

    When a judge has `judge_rollout`, the runner calls it instead of `judge`.
    """

    async def judge_rollout(self, workflow_task: WorkflowTask, output: WorkflowOutput) -> JudgeOutput: ...


@runtime_checkable
class DescribesEngineConfig(Protocol):
    """A `Backbone` that translates the astuner config into its engine's own (verl, Trinity-RFT).

    `astuner config show --backbone NAME` prints what `engine_config` returns.
    `plugins` are the run's: the algorithms the config chooses are found
    among them, with their counterparts in the engine
    (`astuner.training.algorithm_counterpart`).
    """

    def engine_config(self, config: AstunerConfig, plugins: Plugins) -> dict[str, Any]: ...


@runtime_checkable
class DeclaresRunUses(Protocol):
    """A `Backbone` that says what its run uses of the config, so the checks before the run's folder
    (`astuner.components.preflight`) refuse nothing it never reads.

    A backbone without it is checked for everything `RunUses()` names. A
    trainer that loads `model.path` in its own process and validates only
    every `test_freq` steps says:

    ```python
    from astuner.training import AstunerConfig, RunUses


    class MyBackbone:
        def run_uses(self, config: AstunerConfig) -> RunUses:
            t = config.trainer_common
            validates = t.val_before_train or t.test_freq <= (t.total_training_steps or t.test_freq)
            splits = {"train", "validation"} if validates else {"train"}
            return RunUses(splits=frozenset(splits), model="here")
    ```
    """

    def run_uses(self, config: AstunerConfig) -> RunUses: ...


@runtime_checkable
class HasTokenizerPath(Protocol):
    """An engine that knows where its tokenizer is, when that is not `model.path`.

    A `TokenEngine` serving a resolved or converted copy of the model (a
    built-in GGUF checkpoint, a downloaded snapshot) sets `tokenizer_path`;
    `None` means "use the configured model path". The kernel reads it so:

    ```python
    from astuner.api import HasTokenizerPath, load_tokenizer

    own = engine.tokenizer_path if isinstance(engine, HasTokenizerPath) else None
    tokenizer = load_tokenizer(own or model.path)
    ```
    """

    tokenizer_path: str | None


@runtime_checkable
class ClosesAsync(Protocol):
    """Anything built for a run (an engine, an environment factory) that holds resources until closed.

    Whoever built it closes it when the run is done:

    ```python
    from astuner.api import ClosesAsync

    if isinstance(engine, ClosesAsync):
        await engine.aclose()
    ```
    """

    async def aclose(self) -> None: ...


@runtime_checkable
class Closes(Protocol):
    """A run's environment that is released by a plain `close()` (one that is not `ClosesAsync`).

    The runner releases each run's environment after judging: `aclose()`,
    awaited, when it has one, else `close()`.
    """

    def close(self) -> None: ...


@runtime_checkable
class StepsAsync(Protocol):
    """A run's environment that can take a step without blocking the event loop.

    `ModelTuner.agym_step(action)` awaits `astep(action)`, which returns
    what `step(action)` does: `(observation, reward, terminated, info)`;
    on an environment without it, `agym_step` calls `step`.
    """

    async def astep(self, action: Any) -> tuple[Any, float, bool, dict[str, Any]]: ...


@runtime_checkable
class ComputesReward(Protocol):
    """A judge in an older form, given by import string: `compute_reward` instead of `judge`.

    The seeds' `compute_reward(workflow_task, workflow_output)` returns
    `(reward, is_success)`; the first tutorials' form takes one argument,
    `judge_input_dictionary`. `astuner.rollout.judging` adapts either to
    the `Judge` protocol; an object that is a `Judge` as well is judged by
    its `judge`.
    """

    def compute_reward(self, *args: Any) -> Any: ...


@runtime_checkable
class ExecutesTasks(Protocol):
    """A workflow object: `async execute(workflow_task, model_tuner)` runs one rollout (see `Workflow`)."""

    async def execute(self, workflow_task: WorkflowTask, model_tuner: ModelTuner) -> WorkflowOutput: ...


@runtime_checkable
class ExecutesTasksAsSeeds(Protocol):
    """A workflow object in the seeds' form: `agentscope_execute` instead of `execute`.

    `agentscope_execute(workflow_task, model_tuner)`, or the first tutorials'
    `agentscope_execute(init_messages, astune_proxy, config)`. It is used
    when the object has no `execute` of its own (a `Workflow` subclass
    inherits one that only raises).
    """

    async def agentscope_execute(self, *args: Any) -> Any: ...


@runtime_checkable
class DeclaresTrainableTargets(Protocol):
    """A workflow that names the agents whose calls train (`rollout.trainable_targets` overrides it).

    None or empty: every agent's calls train.
    """

    trainable_targets: list[str] | None


@runtime_checkable
class NamesItsOrigin(Protocol):
    """A `Judge` that says where it came from (`'my_package.judge->MyJudge'`), for the runner's messages.

    An error about a judge's rewards names `where` when the judge has it,
    else the judge's class.
    """

    where: str


@runtime_checkable
class ReportsReadiness(Protocol):
    """A plugin module that can tell, once loaded, that something it needs at run time is missing.

    Its module-level `astuner_readiness()` returns `None` when ready, or a
    `NotReady(status, hint)` (e.g. the engine is not installed, and the pip
    line that installs it), which `astuner plugins list` shows instead of
    failing the import. An exception it raises is shown the same way.
    """

    def astuner_readiness(self) -> NotReady | None: ...


@runtime_checkable
class ServesAdapters(Protocol):
    """A `TokenEngine` that holds LoRA adapters besides its base weights (per-agent learners).

    `adapter_names` are the adapters it can generate with; a call whose
    `SamplingParams.adapter` names one of them generates with it, and the
    model handle routes an agent's calls to the adapter of that agent's
    name (`agents.<name>.lora`). On an engine without them every agent
    generates with the engine's own weights.
    """

    adapter_names: frozenset[str]


@runtime_checkable
class FollowsPolicy(Protocol):
    """A `TokenEngine` on a server that a trainer keeps in step with the policy it trains.

    Engine `vllm` (astuner-engine-vllm) is one; backbone torch builds it by
    name with `rollout.engine: vllm`, passing after the settings and config
    the keywords `server_args` and `server_env` (what a server it starts
    needs for these updates), `model_dir` (the model to serve or name),
    `start_folder` (called only when it starts the server: writes and returns
    the folder to serve) and `default_log` (where that server logs unless the
    settings say). After each update the trainer calls `load_adapter` (then
    `unload_adapter` on the previous one) or `reload_weights`, then
    `serve_as(name, version)`: later calls name `served_name` and record
    `version`. `attached` is true when the server was running already (a URL
    was given); `check_alive()` raises when the server is gone.
    """

    served_name: str
    attached: bool

    def serve_as(self, name: str, version: int | None) -> None: ...

    async def load_adapter(self, name: str, path: str | Path) -> None: ...

    async def unload_adapter(self, name: str) -> None: ...

    async def reload_weights(self, folder: str | Path) -> None: ...

    async def check_alive(self) -> None: ...


@runtime_checkable
class ServesPage(Protocol):
    """What a companion serving a web page yields once started (the `logview` one: the log viewer).

    `url` opens the page; `wait()` serves on until Ctrl-C, as `astuner run
    --keep-logview` does once the run has ended.
    """

    url: str

    def wait(self) -> None: ...
