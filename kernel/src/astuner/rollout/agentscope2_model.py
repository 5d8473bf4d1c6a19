"""ModelTuner as an AgentScope 2.x chat model: `Agent(model=model_tuner, ...)`.

AgentScope 2.x hands its chat model `Msg` objects rather than OpenAI-style
dicts, and each model carries the `formatter` that converts them for its
API (the agent also asks `model.formatter` which media the model accepts).
The handle's formatter is AgentScope's own `OpenAIChatFormatter`, limited
to text: its dicts (role, content, tool_calls, tool_call_id) are what
`ModelTuner.chat()` takes. Imported only when the installed AgentScope is
2.x (see `astuner.rollout.agentscope_model.model_tuner_class`).
"""

from __future__ import annotations

import time
from functools import cache
from typing import Any

from astuner.core.generation import sampling_overrides
from astuner.core.trajectory import LLMCall
from astuner.rollout.model_tuner import ModelTuner
from astuner.rollout.openai_reply import openai_tool_calls


def to_chat_response(call: LLMCall, started: float) -> Any:
    """An AgentScope 2.x `ChatResponse`: thinking, text and tool-call blocks, plus usage."""
    from agentscope.message import TextBlock, ThinkingBlock, ToolCallBlock
    from agentscope.model import ChatResponse, ChatUsage

    blocks: list[Any] = []
    if call.reasoning:
        blocks.append(ThinkingBlock(thinking=call.reasoning))
    if call.content:
        blocks.append(TextBlock(text=call.content))
    for tc in openai_tool_calls(call):
        # 2.x keeps a call's input as the raw JSON text and parses it when it runs the tool.
        blocks.append(
            ToolCallBlock(id=tc["id"], name=tc["function"]["name"], input=tc["function"]["arguments"])
        )
    if not blocks:
        blocks.append(TextBlock(text=""))
    usage = ChatUsage(
        input_tokens=len(call.prompt_ids),
        output_tokens=len(call.response_ids),
        time=time.perf_counter() - started,
    )
    return ChatResponse(content=blocks, is_last=True, usage=usage)


def offered_tools(tools: list[dict[str, Any]] | None, tool_choice: Any) -> list[dict[str, Any]] | None:
    """The tools the model is shown under a 2.x `ToolChoice` (`mode`, optional `tools` subset).

    `none` hides them all and a `tools` list narrows them; a forced mode
    (`required` or a tool's name) is validated by the caller but cannot be
    enforced on free generation, as with the 1.x model.
    """
    if not tools or tool_choice is None:
        return tools
    if tool_choice.mode == "none":
        return None
    if tool_choice.tools:
        return [tool for tool in tools if tool["function"]["name"] in tool_choice.tools]
    return tools


@cache
def agentscope2_model_tuner_class() -> type[ModelTuner]:
    """A `ModelTuner` subclass that is also an AgentScope 2.x `ChatModelBase`."""
    from agentscope.formatter import OpenAIChatFormatter
    from agentscope.model import ChatModelBase

    class AgentScope2ModelTuner(ModelTuner, ChatModelBase):
        """`await model_tuner(messages, tools=..., tool_choice=...)` as a 2.x `Agent` calls it."""

        def __init__(self, **kwargs: Any) -> None:
            ModelTuner.__init__(self, **kwargs)
            # The agent compresses its context against `context_size`: the engine's real window.
            context = self.tracker.settings.max_model_len if self.tracker is not None else 32768
            ChatModelBase.__init__(
                self,
                credential=None,
                model="astuner",
                parameters=ChatModelBase.Parameters(),
                stream=False,
                context_size=context,
            )
            # Text only: the agent turns media it cannot send into text notes itself.
            self.formatter = OpenAIChatFormatter(input_types=["text/plain"])

        async def _call_api(
            self,
            model_name: str,
            messages: list[Any],
            tools: list[dict[str, Any]] | None = None,
            tool_choice: Any = None,
            **kwargs: Any,
        ) -> Any:
            """One recorded call; of `kwargs` (provider API options) only the sampling settings apply."""
            started = time.perf_counter()
            self._validate_tool_choice(tool_choice, tools)
            openai_messages = await self.formatter.format(messages)
            offered = offered_tools(tools, tool_choice)
            call = await self.chat(openai_messages, offered, **sampling_overrides(kwargs))
            return to_chat_response(call, started)

    return AgentScope2ModelTuner
