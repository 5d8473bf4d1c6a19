"""The context tracker: exact prompt token ids for every model call of a rollout.

Usage, once per rollout (the model handle does this for each agent call):

    tracker = ContextTracker(tokenizer, TrackerSettings(mode="cumulative"))
    prep = tracker.prepare(messages, tools, agent_name="Friday")
    if prep.stop_reason is None:
        out = await engine.generate(prep.prompt_ids, sampling)   # a Generation
        call = tracker.record(prep, out.token_ids, out.logprobs, out.finish_reason)
    else:
        call = tracker.record(prep)          # the stop reply, nothing generated
    # call.content / call.tool_calls / call.tool_call_errors go back to the agent
    trajectory = tracker.trajectory("rollout-7", task_id=..., group_id=...)
    # or simply: call = await tracker.call(messages, tools, agent_name, generate)

Each agent name has its own context: the messages, tools and token ids
(prompt + response) of its last call. A new call *continues* that context
when its messages are the old ones plus an assistant message (the reply,
as the agent echoes it) plus any new messages, with the same tools.

- `cumulative` mode: a continuing call's prompt is the old prompt + response
  ids + the tokens of what the chat template writes after the assistant's
  end-of-turn token (the template's delta for the new messages). The
  template is rendered over the history with and without the new messages;
  unless the longer rendering extends the shorter one, the call falls back
  to `template` and the fallback is counted.
- `template` mode: the template is applied to the whole history each call;
  a continuing call whose ids do not extend the old prompt + response
  (retokenisation drift, reasoning dropped from history, re-serialised
  tool calls) is marked `drift` and counted.

Guards: tool/environment messages longer than `max_env_len` tokens are
clipped with a visible marker; a prompt that leaves no room for
`max_response_length_in_one_turn` within `max_model_len` is not sent: the
tracker sets `context_overflow` and the call gets an empty stop reply (text
too long to fit by its size alone is not even encoded: `core.token_bound`).

Hand-written rather than re-applying the chat template each call: retokenised
history is not the ids the model sampled, and training would score those.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from astuner.core.chat import Message, normalize_messages
from astuner.core.generation import Generation
from astuner.core.madness import MadnessMonitor
from astuner.core.token_bound import TooLong, encode_within
from astuner.core.tokenizer import ChatTokenizer
from astuner.core.toolcalls import get_tool_parser
from astuner.core.toolformat import resolve_tool_format
from astuner.core.trajectory import LLMCall, PromptSource, TrackerStats, Trajectory

Generate = Callable[[list[int], int], Awaitable[Generation | tuple[Any, ...]]]
"""`async generate(prompt_ids, max_new_tokens) -> (response_ids, logprobs, finish_reason)`."""

CLIP_MARKER = "\n[... {n} tokens clipped by astuner ...]"


@dataclass(frozen=True)
class TrackerSettings:
    """Everything the tracker needs from the config, as plain values."""

    mode: Literal["cumulative", "template"] = "cumulative"
    max_model_len: int = 18000
    max_response_length_in_one_turn: int = 4096
    max_env_len: int = 4096
    clip_roles: tuple[str, ...] = ("tool",)
    tool_parser: str = "hermes"
    tool_format: str = "auto"
    tool_demonstration: tuple[Mapping[str, Any], ...] = ()
    chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict)


@dataclass
class PreparedCall:
    """The prompt of one call, before generation; with `stop_reason` (`context_overflow`,
    `madness`) it must not be sent, and `record(prepared)` returns the stop reply."""

    agent_name: str
    messages: list[Message]
    tools: list[dict[str, Any]] | None
    prompt_ids: list[int]
    prompt_source: PromptSource
    drift: bool
    new_context: bool
    max_new_tokens: int
    stop_reason: str | None = None
    prepare_s: float = 0.0
    prepared_at: float = 0.0
    rendered: str | None = None  # the template over `messages` with the generation prompt


@dataclass
class _Context:
    """One agent's conversation as the model saw it after its last call."""

    messages: list[Message]
    tools: list[dict[str, Any]] | None
    ids: list[int]
    closed: bool  # the last response ended with a stop token
    history_text: str | None = None  # the template over `messages`, rendered on demand


class ContextTracker:
    """Builds prompt ids and records responses for one rollout (see the module doc)."""

    def __init__(
        self,
        tokenizer: ChatTokenizer,
        settings: TrackerSettings | None = None,
        madness: MadnessMonitor | None = None,
        on_tools: Callable[[], None] | None = None,
    ) -> None:
        """`on_tools` is called at each call that offers tools, before its prompt is built: the run
        says how tools reach the model only once it knows that its workflow offers any."""
        self.tokenizer = tokenizer
        self.settings = settings or TrackerSettings()
        if self.settings.mode not in ("cumulative", "template"):
            raise ValueError(f"unknown context tracker mode {self.settings.mode!r}")
        self.madness = madness
        self._on_tools = on_tools
        self.tool_format = resolve_tool_format(
            tokenizer, self.settings.tool_format, self.settings.tool_parser, self.settings.tool_demonstration
        )
        self._parse = get_tool_parser(self.tool_format.parser)
        self._template_kwargs = dict(self.settings.chat_template_kwargs)
        self._gen_suffix = tokenizer.generation_suffix(**self._template_kwargs)
        self._contexts: dict[str, _Context] = {}
        self._clipped: dict[str, str] = {}
        self.calls: list[LLMCall] = []
        self.stats = TrackerStats()
        self.context_overflow = False
        self.stop_reason: str | None = None

    # ------------------------------------------------------------------ prompt

    def prepare(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        agent_name: str = "default",
    ) -> PreparedCall:
        """Build the prompt ids for a call with these OpenAI-style messages and tools."""
        t0 = time.perf_counter()
        msgs = [self._clip(m) for m in normalize_messages(messages)]
        tool_list = [dict(t) for t in tools] if tools else None
        if tool_list and self._on_tools is not None:
            self._on_tools()
        if self.stop_reason is not None:
            return self._prepared(agent_name, msgs, tool_list, [], "none", t0, self.stop_reason)
        ctx = self._contexts.get(agent_name)
        continues = ctx is not None and self._continues(ctx, msgs, tool_list)
        ids: list[int] | None = None
        text: str | None = None
        source: PromptSource = "template"
        try:
            if continues and self.settings.mode == "cumulative":
                assert ctx is not None
                text = self.render(msgs, tool_list, True)
                delta = self._delta(ctx, msgs, text)
                if delta is None:
                    source = "fallback"
                else:
                    ids, source = ctx.ids + delta, "cumulative"
            if ids is None:
                text = text or self.render(msgs, tool_list, True)
                ids = encode_within(self.tokenizer, text, self.settings.max_model_len)
        except TooLong:
            ids, source = [], "none"
        prep = self._prepared(agent_name, msgs, tool_list, ids, source, t0, None)
        prep.rendered = text
        if continues and source not in ("cumulative", "none"):
            assert ctx is not None
            n = len(ctx.ids)
            prep.drift = len(ids) < n or ids[:n] != ctx.ids
        prep.new_context = ctx is not None and not continues
        room = self.settings.max_model_len - len(ids)
        if source == "none" or self.settings.max_response_length_in_one_turn > room:
            prep.stop_reason = "context_overflow"
        prep.max_new_tokens = max(0, min(self.settings.max_response_length_in_one_turn, room))
        prep.prepare_s = time.perf_counter() - t0
        return prep

    def _prepared(
        self,
        agent: str,
        msgs: list[Message],
        tools: list[dict[str, Any]] | None,
        ids: list[int],
        source: PromptSource,
        t0: float,
        stop: str | None,
    ) -> PreparedCall:
        now = time.perf_counter()
        return PreparedCall(
            agent_name=agent,
            messages=msgs,
            tools=tools,
            prompt_ids=ids,
            prompt_source=source,
            drift=False,
            new_context=False,
            max_new_tokens=0,
            stop_reason=stop,
            prepare_s=now - t0,
            prepared_at=now,
        )

    def render(self, msgs: Sequence[Message], tools: list[dict[str, Any]] | None, gen: bool) -> str:
        """The template over `msgs` in the tool format, for `tokenizer.encode`.

        Special-token text in any string of the messages and tools, including
        what the tool format writes from them, renders as a stand-in that
        `encode` reads back as plain text (see `ChatTokenizer.render`): only
        the template itself writes control tokens.
        """
        shown, shown_tools = self.tool_format.apply(msgs, tools)
        return self.tokenizer.render(shown, shown_tools, add_generation_prompt=gen, **self._template_kwargs)

    @staticmethod
    def _continues(ctx: _Context, msgs: list[Message], tools: list[dict[str, Any]] | None) -> bool:
        k = len(ctx.messages)
        return (
            len(msgs) > k
            and msgs[k]["role"] == "assistant"
            and tools == ctx.tools
            and msgs[:k] == ctx.messages
        )

    def _delta(self, ctx: _Context, msgs: list[Message], text: str) -> list[int] | None:
        """Tokens the template writes after the assistant turn, or None if they
        cannot be cut cleanly (the history renders differently once the new
        messages are appended). `text` is the template over `msgs` with the
        generation prompt."""
        eot = self.tokenizer.end_of_turn
        # The turn is cut at the first end-of-turn text after the history; a reply
        # that spells that text out itself would be cut short, so re-render instead.
        if eot in repr(msgs[len(ctx.messages)]):
            return None
        if ctx.history_text is None:
            ctx.history_text = self.render(ctx.messages, ctx.tools, False)
        if not text.startswith(ctx.history_text):
            return None
        rest = text[len(ctx.history_text) :]
        # `rest` is the assistant turn as the template re-renders it, then the new
        # messages; the ids already hold what the model really generated, so
        # only what follows the turn's end-of-turn token is new.
        cut = rest.find(eot)
        if cut < 0:
            return None
        delta = encode_within(self.tokenizer, rest[cut + len(eot) :], self.settings.max_model_len)
        # A reply cut off by the length budget never wrote its end-of-turn token:
        # the template closes the turn, so the token is a prompt token here.
        return delta if ctx.closed else [self.tokenizer.end_of_turn_id, *delta]

    def _clip(self, msg: Message) -> Message:
        if msg["role"] not in self.settings.clip_roles:
            return msg
        content: str = msg["content"]
        limit = self.settings.max_env_len
        # Byte-level tokenizers never make more tokens than UTF-8 bytes (one more
        # for a sentencepiece prefix), so short outputs skip tokenisation.
        if len(content) < limit and len(content.encode()) < limit:
            return msg
        clipped = self._clipped.get(content)
        if clipped is None:
            ids = self.tokenizer.encode_literal(content)
            if len(ids) <= limit:
                clipped = content
            else:
                clipped = self.tokenizer.decode(ids[:limit]) + CLIP_MARKER.format(n=len(ids) - limit)
                self.stats.clipped_env_outputs += 1
            self._clipped[content] = clipped
        if clipped is content:
            return msg
        return {**msg, "content": clipped}

    # ---------------------------------------------------------------- response

    def record(
        self,
        prepared: PreparedCall,
        response_ids: Sequence[int] = (),
        response_logprobs: Sequence[float] | None = None,
        finish_reason: str = "stop",
    ) -> LLMCall:
        """Record the engine's answer to `prepared` and return the call.

        For a prepared call with a `stop_reason`, call it without a response:
        the result is the stop reply (empty text, not trainable).
        """
        t0 = time.perf_counter()
        generate_s = t0 - prepared.prepared_at
        st = self.stats
        st.calls += 1
        call = LLMCall(
            index=len(self.calls),
            agent_name=prepared.agent_name,
            messages=prepared.messages,
            tools=prepared.tools,
            prompt_ids=prepared.prompt_ids,
            prompt_source=prepared.prompt_source,
            drift=prepared.drift,
        )
        if prepared.stop_reason is not None:
            st.stop_replies += 1
            if prepared.stop_reason == "context_overflow":
                st.context_overflows += 1
                self.context_overflow = True
                # Never sent nor trained: a context's worth of the prompt is plenty to see what overflowed.
                call.prompt_ids = prepared.prompt_ids[: self.settings.max_model_len]
                omitted = len(prepared.prompt_ids) - len(call.prompt_ids)
                call.prompt_ids_omitted = None if prepared.prompt_source == "none" else omitted
            call.finish_reason = prepared.stop_reason
            call.trainable = False
        else:
            self._count_source(prepared)
            ids = list(response_ids)
            logprobs = None if response_logprobs is None else [float(x) for x in response_logprobs]
            if logprobs is not None and len(logprobs) != len(ids):
                raise ValueError(f"{len(logprobs)} logprobs for {len(ids)} response ids")
            closed = bool(ids) and ids[-1] in self.tokenizer.stop_token_ids
            call.text = self.tokenizer.decode(ids[:-1] if closed else ids)
            parsed = self._parse(call.text)
            call.content, call.reasoning = parsed.content, parsed.reasoning
            # Ids unique within the rollout, so a tool result names the one call it answers.
            call.tool_calls = [
                tc.model_copy(update={"id": f"call_{call.index}_{i}"})
                for i, tc in enumerate(parsed.tool_calls)
            ]
            call.tool_call_errors = parsed.errors
            call.tool_parse_error = parsed.parse_error
            call.response_ids, call.response_logprobs = ids, logprobs
            call.finish_reason = finish_reason
            self._contexts[prepared.agent_name] = _Context(
                prepared.messages,
                prepared.tools,
                prepared.prompt_ids + ids,
                closed,
                self._history_text(prepared.rendered),
            )
            if self.madness is not None:
                call.madness = self.madness.observe(call)
                if self.madness.should_stop:
                    self.stop_reason = "madness"
        call.timings = {
            "prepare_s": prepared.prepare_s,
            "generate_s": generate_s,
            "record_s": time.perf_counter() - t0,
        }
        self.calls.append(call)
        return call

    def _history_text(self, rendered: str | None) -> str | None:
        """The template over a call's messages without the generation prompt, cut
        from the rendering with it when the template only appends that prompt;
        None leaves it to be rendered when the next call needs it."""
        suffix = self._gen_suffix
        if rendered is None or suffix is None or not rendered.endswith(suffix):
            return None
        return rendered[: len(rendered) - len(suffix)]

    def _count_source(self, prepared: PreparedCall) -> None:
        st = self.stats
        if prepared.prompt_source == "cumulative":
            st.cumulative_calls += 1
        else:
            st.template_calls += 1
        st.fallbacks += prepared.prompt_source == "fallback"
        st.drifts += prepared.drift
        st.new_contexts += prepared.new_context

    async def call(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
        agent_name: str,
        generate: Generate,
    ) -> LLMCall:
        """`prepare`, generate (unless the call must stop), `record`."""
        prep = self.prepare(messages, tools, agent_name)
        if prep.stop_reason is not None:
            return self.record(prep)
        # A Generation, or the plain `(ids, logprobs, finish_reason)` of an engine written before versions.
        generation = Generation(*await generate(prep.prompt_ids, prep.max_new_tokens))
        call = self.record(prep, generation.token_ids, generation.logprobs, generation.finish_reason)
        call.policy_version = generation.policy_version
        if generation.sampling is not None:
            call.sampling = generation.sampling.record()
        return call

    def trajectory(self, trajectory_id: str, **fields: Any) -> Trajectory:
        """A `Trajectory` of the calls so far (`fields`: task_id, group_id, reward, ...)."""
        madness = list(self.madness.flags) if self.madness is not None else []
        return Trajectory(
            trajectory_id=trajectory_id,
            calls=list(self.calls),
            madness=madness,
            tracker=self.stats.model_copy(),
            **fields,
        )
