"""The plugin contract: every hook a plugin may implement.

A plugin is a module (or object) with functions marked `@hookimpl`, found
through the `astuner` entry-point group. Each `register_*` hook receives a
`register` callback and calls it once per thing the plugin provides:

    from astuner.api import hookimpl

    @hookimpl
    def register_judges(register):
        register("exact", ExactJudge, settings=ExactJudgeSettings)

`register(name, factory, *, settings=None, summary="", reads=None, key_homes=None,
old_names=(), switched_on_by=(), counterparts=None, defaults=None, aliases=())`:

- `name` is what users write in config (`task_judge.judge_protocol: exact`).
- `factory` builds the thing. It is only called when a run needs it, so a
  plugin module imports cheaply and puts heavy imports (torch, datasets,
  agentscope) inside the factory.
- `settings` is an optional pydantic model for the plugin's own config
  sub-block (e.g. `task_reader.jsonl`); when given, the factory is called
  with the validated block, otherwise with no arguments.
- `summary` is one line shown by `astuner plugins list`.

Optional declarations say what the kernel would otherwise have to know
about the plugin (each is refused on a kind it means nothing for):

- `reads` (backbones): dotted prefixes of the shared config's keys this
  backbone reads, of those not every backbone reads. A key under a prefix
  no backbone declares is read by every backbone; a key under declared
  prefixes is read by the backbones that declare its longest one. So list
  your own block and the sections only some backbones read, and inside them
  each narrower prefix another backbone declared that you read too:
  `reads=("trainer_common", "data.train_batch_size", "my_block")`. A run
  then names the keys the user set that the backbone never reads ("Not used
  on backbone ..."). Without `reads` a backbone is never told of such keys.
- `key_homes` (backbones): where `<section>.<backbone>_only__<key>`, the
  seeds' spelling of a key for one backbone, lives on this backbone when
  not under its section, e.g. `{"n_vllm_engine":
  "trinity.explorer.rollout_model.engine_num"}`.
- `old_names` (readers, workflows, judges, engines, executors): the names
  the seeds gave this thing, read as `name` where the config chooses it, with
  one notice. An import string is read under the old packages of its kind
  (`math_answer_as_judge->MathAnswerAsJudge` matches
  `astune.task_judge.math_answer_as_judge->MathAnswerAsJudge`).
- `switched_on_by` (notifiers): environment variables that turn this
  notifier on without a `notify.<name>` block (`PHONE_NUMBERS` for `sms`).
- `counterparts` (advantage estimators, policy losses): the same algorithm
  in a backbone whose engine computes it itself, by backbone name: what
  that backbone's translated config sets for it, e.g. `{"verl": "gspo",
  "trinity": "gspo"}`. A backbone refuses an algorithm without its
  counterpart there, naming the config key.
- `aliases` (advantage estimators, policy losses): other names the config
  may choose it by (`multi_step_grpo` for `grpo`).
- `defaults` (policy losses): the values of `trainer_common.clip_ratio_low`,
  `clip_ratio_high` and `loss_agg_mode` the loss wants where the user
  leaves them unset (`{"clip_ratio_high": 0.28}`); a value the user sets wins.

A factory never receives the whole run config. Besides its settings block it
is given, by keyword, each of these named services whose name its signature
declares (types in `astuner.api`, `WorkflowSource` in `astuner.training`):

- `engines` (`Engines`): `engines.build(name, settings, model, key=...)`
  builds any installed engine from that engine's raw settings block (checked
  against its settings model; errors name `key` and the wrong key in it) and
  the `EngineModel` it serves: an LLM judge's own model, say.
- `judge_model` (`EngineModel | None`): the judging model the kernel's
  `task_judge.alien_llm_model` and `alien_llm_response_length` name.
- `run_folder` (`Path | None`): the run's folder, where it has one.
- `settings_of` (`SettingsOf`): `settings_of(kind, name)`, the validated
  settings block of another plugin of the run, e.g. a companion's
  `settings_of("reader", "env_service")`.
- `workflow_source` (`WorkflowSource`): the run's workflow name, search
  paths and rollout timeout, for an executor that loads the workflow
  elsewhere.

    @hookimpl
    def register_judges(register):
        register("llm", LlmJudge, settings=LlmJudgeSettings)

    class LlmJudge:
        def __init__(self, settings, engines, judge_model):
            model = EngineModel(path=settings.model or judge_model.path, max_tokens=64)
            self.engine = engines.build(settings.engine, settings.engine_settings, model)

What each factory must return is described per hook below and typed in
`astuner.api`, the kernel module an extension plugin imports (readers,
workflows, judges, engines, notifiers, companions), or in `astuner.training`,
which backbones, executors and commands that run rollouts import as well.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import pluggy

if TYPE_CHECKING:
    import typer
    from pydantic import BaseModel

    from astuner.lifecycle import Runs

hookspec = pluggy.HookspecMarker("astuner")
hookimpl = pluggy.HookimplMarker("astuner")


class Register(Protocol):
    """The callback handed to every `register_*` hook."""

    def __call__(
        self,
        name: str,
        factory: Callable[..., Any],
        *,
        settings: type[BaseModel] | None = None,
        summary: str = "",
        reads: Iterable[str] | None = None,
        key_homes: Mapping[str, str] | None = None,
        old_names: Iterable[str] = (),
        switched_on_by: Iterable[str] = (),
        counterparts: Mapping[str, Any] | None = None,
        defaults: Mapping[str, Any] | None = None,
        aliases: Iterable[str] = (),
    ) -> None: ...


class RegisterMetric(Protocol):
    """The callback handed to `register_metrics`."""

    def __call__(
        self,
        key: str,
        *,
        label: str,
        description: str = "",
        unit: str = "",
        good: str | None = None,
        health: Any = None,
        console: bool = False,
        group: str = "",
    ) -> None: ...


@hookspec
def register_readers(register: Register) -> None:
    """Register task readers.

    The factory returns a `TaskReader`: `read(split)` yields `Task`s for
    `"train"` or `"validation"`. Settings live under `task_reader.<name>`;
    the reader is chosen by `task_reader.type`.
    """


@hookspec
def register_workflows(register: Register) -> None:
    """Register ready-made workflows by name.

    The factory returns a workflow: a `Workflow` subclass instance or an
    `async def workflow(task, model, auxiliary_models)` function. Chosen by
    `rollout.agentscope_workflow` (a name or an import string).
    """


@hookspec
def register_judges(register: Register) -> None:
    """Register judges.

    The factory returns a `Judge`: `async judge(task, output) -> JudgeOutput`.
    Settings live under `task_judge.<name>`; the judge is chosen by
    `task_judge.judge_protocol`. A judge that asks a model of its own
    declares the `engines` and `judge_model` services (module docstring) and
    builds its engine from its own settings: never from the run's config.
    """


@hookspec
def register_madness_checks(register: Register) -> None:
    """Register bad-output detectors (the "madness" checks).

    The factory returns a check that inspects one finished trajectory and
    says whether, and why, the agent went off the rails. Checks run when
    listed in `rollout.compute_madness_checklist`; settings live under
    `rollout.madness.<name>`.
    """


@hookspec
def register_backbones(register: Register) -> None:
    """Register backbones: what `astuner run --backbone NAME` dispatches to.

    The factory returns a `Backbone`: `run(ctx: RunContext) -> None`. Its
    settings, if any, live in the block named after it (`debug:`, `torch:`).
    """


@hookspec
def register_engines(register: Register) -> None:
    """Register inference engines.

    The factory is called as `factory(settings, model)` (just `factory(model)`
    without a settings model): `model` is the `EngineModel` it serves (path,
    url, max_model_len, max_tokens per reply, tensor_parallel_size, seed),
    made by the kernel from `model.path` and `rollout.*` for the policy, from
    an `auxiliary_models.<name>` entry for an auxiliary model, or by a plugin
    through the `engines` service. It returns a `TokenEngine`
    (`async generate(prompt_ids, sampling) -> Generation`: ids, logprobs, finish_reason and
    optionally the policy version)
    or, for text-only remote endpoints, a `ChatEngine`; both are in
    `astuner.api`. An engine may have `async aclose()` (`ClosesAsync`). Settings
    live under `rollout.engines.<name>`; the engine is chosen by `rollout.engine`.
    """


@hookspec
def register_executors(register: Register) -> None:
    """Register workflow executors: where each rollout's workflow runs.

    The factory returns a `WorkflowExecutor`: `session(runner)` is entered
    around each `runner.run()` and `async run_workflow(runner, workflow_task,
    tuner)` runs one rollout's workflow; the runner keeps the engine, context
    tracker, judge and madness checks. Chosen by `rollout.executor`, checked
    against the installed executors when the config loads; `local`, the
    default, is no executor: the workflow runs in the runner's event loop.
    There is no settings block; an executor that loads the workflow in
    another process declares the `workflow_source` service. The config a
    workflow reads reaches it as `workflow_task.config`.
    """


@hookspec
def register_notifiers(register: Register) -> None:
    """Register notifiers: who hears that a run ended.

    The factory returns a `Notifier`: `notify(summary: RunSummary) -> None`,
    called once when a run ends (finished, failed or interrupted) with what
    it produced (`astuner.api.RunSummary`). A notifier runs when the
    config has its block, `notify.<name>` (its settings). One that fails or
    hangs is logged and left behind; it never fails or holds up the run.
    """


@hookspec
def register_companions(register: Register) -> None:
    """Register companions: services started beside a run and stopped after it.

    Asked for on the command line as `astuner run --with-NAME [VALUE]` (and
    `astuner eval`). The factory is called as `factory(value, **services)`:
    the flag's value (None for a bare flag), and the named services it
    declares (module docstring), typically `run_folder` (for its log) and
    `settings_of` (the block of the reader it serves, say). It returns a
    context manager that starts the service on entry, returns once it is
    ready, and stops it on exit; an `astuner.api.Companion` (a process
    awaited on `/healthz`) is one.

    The name `logview` is the log viewer's (plugin astuner-logview):
    `astuner run --with-logview` starts it with the `--logview-port` value
    as a string, and its context manager must yield an object with `url`,
    and `wait()` for `--keep-logview` (the kernel's `ServesPage` protocol).
    """


@hookspec
def register_advantage_estimators(register: Register) -> None:
    """Register advantage estimators.

    The factory, called with no arguments when a run needs it, returns the
    estimator: a pure numpy function

        estimator(scores: (B,) float64, group: (B,) int64, eps: float) -> (baseline: (B,), scale: (B,))

    of one score per trajectory (or per agent's share of one) and its task
    group; trajectory i's advantage is `(score_i - baseline_i) / scale_i`,
    broadcast to its generated tokens. Chosen by
    `trainer_common.algorithm.adv_estimator`. `counterparts` names the same
    algorithm in an engine that computes advantages itself, by backbone
    (`{"verl": ("grpo", True), "trinity": "multi_step_grpo"}`: what that
    backbone's translated config sets); a backbone refuses an estimator
    without its counterpart, naming the key. `aliases` are other names the
    estimator goes by.
    """


@hookspec
def register_policy_losses(register: Register) -> None:
    """Register policy losses.

    The factory, called with no arguments when a run needs it, returns the
    loss: a pure torch function of per-token tensors

        loss(logprobs, old_logprobs, advantages, mask, settings) -> (per_token_loss, clipped)

    where the four tensors and both results are `(B, T)` (`mask` 1.0 on
    generated tokens), and `settings` is an `astuner.training.PolicyLossSettings`
    (`clip_low`, `clip_high`, `options`). The trainer aggregates
    `per_token_loss` over the step (`trainer_common.loss_agg_mode`) and
    reports the masked mean of `clipped` (1.0 where the clip acted: PPO's
    took the token's gradient away, CISPO's capped its weight) as
    `actor/clip_frac`. Chosen by
    `trainer_common.algorithm.policy_loss`. With `settings=` a pydantic model,
    `trainer_common.algorithm.policy_loss_args` is validated against it and
    reaches the loss as `settings.options`. `defaults` gives the values of
    `trainer_common.clip_ratio_low`, `clip_ratio_high` and `loss_agg_mode` the
    loss wants when the user leaves them unset; `counterparts` and `aliases`
    as for advantage estimators.
    """


@hookspec
def register_metrics(register: RegisterMetric) -> None:
    """Declare step metrics: what each means, once, for every place that shows it.

    `register(key, label=..., description=..., unit="", good=None,
    health=None, console=False, group="")` per metric. `key` is the metric's
    name in `metrics.jsonl` with placeholders: `{split}` (train, val, eval),
    `{name}` and `{metric}` (each any one path segment, the last one of a key
    the rest of it), e.g. `"{split}/reward_mean"`, `"actor/grad_norm"`,
    `"{split}/agent/{name}/judge/{metric}"`; `label` and `group` may use
    `{name}` and `{metric}` (`group="agent: {name}"`: a chart section per
    agent). `good` is `"up"`, `"down"` or None; `health` an
    `astuner.training.HealthRule` (a threshold and what crossing it means);
    `console` puts it on each step's console line. The console line,
    TensorBoard's chart layout, the log viewer's charts and the health checks
    all read these declarations.
    """


@hookspec
def register_commands(cli: typer.Typer, runs: Runs) -> None:
    """Add sub-commands to the `astuner` command line.

    `cli` is the root typer app; add a command or a sub-app to it, e.g.
    `cli.add_typer(serve_app, name="serve-game")`. `runs` (`astuner.api.Runs`)
    is what the commands need of the kernel: `runs.plugins`, the plugins the
    command line loaded (never build a second `Plugins()`), and
    `runs.open(config, command="NAME", companions=...)`, which opens a run of
    the command as `astuner run` opens its own (a `RunLifecycle`: folder, log
    file, `status.json`, companions, notifiers, closing lines); wrap the work
    in `with runs.open(...) as run:` and write into `run.experiment`. A hook
    that takes only `cli` is fine.
    """
