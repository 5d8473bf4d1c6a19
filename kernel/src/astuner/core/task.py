"""What readers produce and what workflows and judges exchange.

These are the types a user's code touches: a reader yields `Task`s, a
workflow returns a `WorkflowOutput`, a judge returns a `JudgeOutput`.
All are pydantic models so they serialise to the rollout log as JSON.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_serializer, model_validator


class Task(BaseModel):
    """One task from a task set.

    `main_query` is what the agent is asked; `metadata` keeps the raw row
    (e.g. the reference `answer`) so judges can read whatever they need.
    `env_type` is set for tasks served by an environment service.
    """

    model_config = ConfigDict(extra="forbid")

    task_id: str
    main_query: str = ""
    metadata: dict[str, Any] = Field(default_factory=dict)
    env_type: str | None = None

    @property
    def answer(self) -> Any:
        """The reference answer, when the task set has one."""
        return self.metadata.get("answer")


@runtime_checkable
class HasTextContent(Protocol):
    """A message that gives its text, as AgentScope's `Msg` does (None when it holds no text).

    Declared here rather than in `astuner.protocols`, which builds on this
    module: the token core depends on nothing above it.
    """

    def get_text_content(self) -> str | None: ...


def text_of(value: Any) -> str | None:
    """The text of a response: a string as is, an AgentScope `Msg` by its text content.

    Anything else is written as `str(value)`; None stays None.
    """
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, HasTextContent):
        return value.get_text_content() or ""
    return str(value)


class WorkflowOutput(BaseModel):
    """What a workflow returns after one run.

    `reward` may be set by the workflow itself (a float, or one float per
    step); when it is None the configured judge decides. `response` is
    whatever the workflow wants the judge to see (a string, an AgentScope
    `Msg`, any object): the judge receives it as returned, records keep its
    text (`response_text`). `metadata` carries what the judge reads, e.g.
    `final_answer`.
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    reward: float | list[float] | None = None
    is_success: bool | None = None
    response: Any = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    metrics: dict[str, float] = Field(default_factory=dict)

    @property
    def response_text(self) -> str | None:
        """The response as text (see `text_of`)."""
        return text_of(self.response)

    @field_serializer("response")
    def _response_as_text(self, value: Any) -> str | None:
        return text_of(value)

    def with_judge_input(self, judge_input: dict[str, Any]) -> WorkflowOutput:
        """This output with what the workflow handed over by `update_judge_input_dictionary`.

        The values join `metadata` (what the workflow set there itself wins);
        `raw_reward` and `is_success` handed over together are the verdict
        (the first tutorials' werewolves game decides its own winner this way).
        """
        if not judge_input:
            return self
        output = self.model_copy(update={"metadata": {**judge_input, **self.metadata}})
        if output.reward is None and "raw_reward" in judge_input and "is_success" in judge_input:
            output.reward = float(judge_input["raw_reward"])
            output.is_success = bool(judge_input["is_success"])
        return output


class JudgeOutput(BaseModel):
    """A judge's verdict on one run.

    `reward` is one number, one per trainable call (per-step rewards), or one
    per agent name (`{"wolf": 1.0, "villager": 0.0}`: each agent's calls
    train on its own reward, with advantages grouped per agent).
    `is_success` left out means: a positive reward (summed over steps or
    agents) is a success, as AgentScope Tuner's `JudgeOutput(reward=...)` implies.

    `metrics` are numbers of this run to chart over steps: each step
    averages a name over the runs that report it, as `<split>/judge/<name>`
    (`{"invalid_votes": 2.0}`: `train/judge/invalid_votes`). A number of one
    agent is named `agent/<agent>/<metric>` (`agent/wolf/fallback_share`)
    and averaged as `<split>/agent/<agent>/judge/<metric>`
    (`train/agent/wolf/judge/fallback_share`, not also under `judge/`): the
    viewer and TensorBoard chart it in that agent's section, beside its
    reward, win rate, calls and tokens. A workflow's `WorkflowOutput.metrics`
    are rolled up the same way.
    """

    model_config = ConfigDict(extra="forbid")

    reward: float | list[float] | dict[str, float]
    is_success: bool = None  # type: ignore[assignment]  # always a bool after validation
    metrics: dict[str, float] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _success_from_reward(self) -> JudgeOutput:
        if isinstance(self.reward, dict) and not self.reward:
            raise ValueError("reward is an empty dict: give each agent's reward by its name")
        if self.is_success is None:
            reward = self.reward
            if isinstance(reward, dict):
                reward = list(reward.values())
            self.is_success = (sum(reward) if isinstance(reward, list) else reward) > 0
        return self


class WorkflowTask(BaseModel):
    """A task as handed to one workflow run, with what that run needs.

    `group_id` names the group of runs on the same task (advantages are
    computed within it), `rollout_id` this run, `repeat_index` its place in
    the group. `gym_env` is the environment client when the task comes
    from an environment service, `auxiliary_models` this run's handles of
    the configured auxiliary models (by name), `config` the resolved
    astuner config, and `model_tuner` the run's model handle (its calls are
    what judges in the first tutorials' style read); all are live objects,
    left out of the JSON form.
    """

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    task: Task
    group_id: str = ""
    rollout_id: str = ""
    repeat_index: int = 0
    gym_env: Any = Field(default=None, exclude=True)
    auxiliary_models: dict[str, Any] = Field(default_factory=dict, exclude=True)
    config: Any = Field(default=None, exclude=True)
    model_tuner: Any = Field(default=None, exclude=True)
