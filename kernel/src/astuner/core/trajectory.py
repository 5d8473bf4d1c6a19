"""What a rollout records: model calls, trajectories and training samples.

These pydantic models are the rollout log format: one `Trajectory` per line
of `rollouts/step_<n>.jsonl`, written by `astuner.record.append_trajectories`
and read back by `astuner.record.read_trajectories` (the line keeps messages
a call repeats once, and clips huge texts: see `astuner.record_lines`).

Token lists are plain `list[int]` / `list[float]` so the log is readable by
any JSON tool; backbones turn them into tensors.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

PromptSource = Literal["template", "cumulative", "fallback", "none"]
"""How a call's prompt ids were built.

`template`: the chat template applied to the whole history (first call of a
context, template mode, or a new context); `cumulative`: previous prompt +
response + the template's delta for new messages; `fallback`: cumulative
mode had to re-render because the delta was not a pure extension; `none`:
no prompt ids were made (the call was stopped before rendering, or its text
alone was too long to fit in `max_model_len` tokens and was not encoded).
"""

FinishReason = str
"""`stop` (end-of-turn token), `length` (response budget), `context_overflow`
(prompt + budget over `max_model_len`, not sent), `madness` (stopped after a
madness check fired), or whatever else an engine reports."""


class ToolCall(BaseModel):
    """One tool call parsed from generated text, in OpenAI's shape.

    `arguments` is the JSON text of the arguments object, as OpenAI sends it.

    >>> from astuner.api import ToolCall
    >>> ToolCall(id="call_0", name="search", arguments='{"query": "Kenya"}').to_openai()
    {'id': 'call_0', 'type': 'function', 'function': {'name': 'search', 'arguments': '{"query": "Kenya"}'}}
    """

    model_config = ConfigDict(extra="forbid")

    id: str
    name: str
    arguments: str = "{}"

    def to_openai(self) -> dict[str, Any]:
        """`{"id", "type": "function", "function": {"name", "arguments"}}`."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


class ToolCallError(BaseModel):
    """A tool call the model tried to make but wrote wrongly: `raw` is its text, `error` why.

    The agent gets the reply as plain text; the `wrong_toolcall` madness
    check and the run metrics (`tool_parse_failures`) count these.
    """

    model_config = ConfigDict(extra="forbid")

    id: str
    raw: str
    error: str
    name: str = ""


class CallSampling(BaseModel):
    """The sampling settings an engine was given for one call, as recorded.

    `temperature == 0` was greedy (its log-probs are at temperature 1);
    `max_tokens` is the call's own budget (the configured one, lowered to
    what fitted in the context); `adapter` the LoRA adapter that generated
    it (`agents.<name>.lora`), None for the policy itself or the base model.
    """

    model_config = ConfigDict(extra="forbid")

    temperature: float
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int | None = None
    adapter: str | None = None

    @property
    def logprob_temperature(self) -> float:
        """The T the call's log-probs are at, log-softmax(logits / T): 1 when greedy."""
        return self.temperature if self.temperature > 0.0 else 1.0


class LLMCall(BaseModel):
    """One model call: what went in, what came out, token for token.

    `prompt_ids` is exactly what the engine was given and `response_ids`
    exactly what it generated (the end-of-turn token included when the
    model stopped on it). A `context_overflow` call was given nothing: it
    keeps at most `max_model_len` ids of its prompt, the first, and
    `prompt_ids_omitted` counts the rest (None: the prompt was not encoded
    at all, its text alone being too long to fit); every other call has 0
    there. `response_logprobs[i]` is the sampling log-prob of
    `response_ids[i]`, or None when the engine gives none. `tool_parse_error`
    says why a reply that tried to call a tool could not be read (the
    agent then got `content`, the plain text; `tool_call_errors` has each
    malformed call). `policy_version` is the version of the weights that
    generated the response (see `Generation`), `sampling` the settings it
    was sampled with (None in records written before they were kept: the
    config's `rollout.*` then). A call with
    `trainable=False` (stop replies, engines without token ids) is logged
    but never trained on.
    """

    model_config = ConfigDict(extra="forbid")

    index: int = 0
    agent_name: str = "default"
    messages: list[dict[str, Any]] = Field(default_factory=list)
    tools: list[dict[str, Any]] | None = None
    prompt_ids: list[int] = Field(default_factory=list)
    prompt_ids_omitted: int | None = 0
    response_ids: list[int] = Field(default_factory=list)
    response_logprobs: list[float] | None = None
    finish_reason: FinishReason = "stop"
    policy_version: int | None = None
    sampling: CallSampling | None = None
    text: str = ""
    content: str = ""
    reasoning: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_errors: list[ToolCallError] = Field(default_factory=list)
    tool_parse_error: str | None = None
    prompt_source: PromptSource = "template"
    drift: bool = False
    trainable: bool = True
    madness: list[str] = Field(default_factory=list)
    timings: dict[str, float] = Field(default_factory=dict)


class TrackerStats(BaseModel):
    """Counters of one rollout's context tracking."""

    model_config = ConfigDict(extra="forbid")

    calls: int = 0
    template_calls: int = 0
    cumulative_calls: int = 0
    fallbacks: int = 0
    drifts: int = 0
    new_contexts: int = 0
    context_overflows: int = 0
    clipped_env_outputs: int = 0
    stop_replies: int = 0


class Trajectory(BaseModel):
    """One run of a workflow on one task.

    `reward` is the final reward used for training (after the judge and the
    madness penalty): a float, one float per trainable call (per-step
    rewards), or None if the run could not be scored. When the judge scored
    each agent on its own, `agent_rewards` holds those rewards by agent name
    (each agent's calls train on its own reward) and `reward` is their mean.
    `madness` lists
    `"<check>: <reason>"` for every check that fired. `error` holds the
    traceback if the workflow raised; such trajectories are not trained on.
    `auxiliary_calls` are the calls of auxiliary models (by the workflow or
    the judge; `agent_name` is the model's name), all untrainable and never
    merged into samples; they come last so that readers can skip them.

    A run keeps its trajectories one per line in `rollouts/*.jsonl`:

    ```python
    from pathlib import Path

    from astuner.api import RunRecords, Trajectory

    with Path("launcher_record/math/20260101-120000/rollouts/step_1.jsonl").open("rb") as lines:
        trajectories: list[Trajectory] = [RunRecords.read_trajectory(line) for line in lines]
    for t in trajectories:
        if t.error is None:
            print(t.task_id, t.reward, t.madness, [call.content for call in t.calls])
    ```
    """

    model_config = ConfigDict(extra="forbid")

    trajectory_id: str
    task_id: str = ""
    group_id: str = ""
    calls: list[LLMCall] = Field(default_factory=list)
    reward: float | list[float] | None = None
    agent_rewards: dict[str, float] = Field(default_factory=dict)
    is_success: bool | None = None
    madness: list[str] = Field(default_factory=list)
    error: str | None = None
    tracker: TrackerStats = Field(default_factory=TrackerStats)
    metrics: dict[str, float] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)
    timings: dict[str, float] = Field(default_factory=dict)
    auxiliary_calls: list[LLMCall] = Field(default_factory=list)


class Sample(BaseModel):
    """One training sequence, made by merging calls (see `astuner.core.merge`).

    All per-token lists have the length of `input_ids` (shape `(T,)`):
    `loss_mask[t]` is 1 exactly where the model generated token t;
    `old_logprobs[t]` is its sampling log-prob there and 0.0 elsewhere
    (None when an engine gave no log-probs); `advantages[t]` is filled by
    `astuner.core.advantages` and 0.0 where the mask is 0.
    `response_spans` lists `(start, end, call_index)`: tokens
    `input_ids[start:end]` are call `call_index`'s response, sampled with
    `response_sampling[k]` for span `k` (None, or an empty list in older
    records: the config's settings).
    """

    model_config = ConfigDict(extra="forbid")

    trajectory_id: str = ""
    group_id: str = ""
    agent_name: str = "default"
    input_ids: list[int] = Field(default_factory=list)
    loss_mask: list[int] = Field(default_factory=list)
    old_logprobs: list[float] | None = None
    advantages: list[float] = Field(default_factory=list)
    call_indices: list[int] = Field(default_factory=list)
    response_spans: list[tuple[int, int, int]] = Field(default_factory=list)
    response_sampling: list[CallSampling | None] = Field(default_factory=list)

    @property
    def num_trained_tokens(self) -> int:
        """How many tokens carry loss."""
        return sum(self.loss_mask)
