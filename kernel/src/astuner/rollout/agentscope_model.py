"""ModelTuner as an AgentScope (1.x) chat model: `ReActAgent(model=model_tuner, ...)`.

AgentScope is imported only here, and only when a workflow has imported it
already (the runner checks), so the kernel and non-AgentScope workflows
never pay its import time. `model_tuner_class()` picks the form for the
installed AgentScope: this module's for 1.x, `agentscope2_model`'s for 2.x.
"""

from __future__ import annotations

import sys
import time
from functools import cache
from typing import Any

from astuner.core.generation import sampling_overrides
from astuner.core.toolcalls import decode_arguments
from astuner.core.trajectory import LLMCall
from astuner.rollout.model_tuner import ModelTuner
from astuner.rollout.openai_reply import openai_tool_calls
from astuner.rollout.unconfined_tool import warn_if_unconfined_python_tool


def to_chat_response(call: LLMCall, started: float) -> Any:
    """An AgentScope `ChatResponse`: thinking, text and tool-use blocks, plus usage."""
    from agentscope.message import TextBlock, ThinkingBlock, ToolUseBlock
    from agentscope.model import ChatResponse
    from agentscope.model._model_usage import ChatUsage

    blocks: list[Any] = []
    if call.reasoning:
        blocks.append(ThinkingBlock(type="thinking", thinking=call.reasoning))
    if call.content:
        blocks.append(TextBlock(type="text", text=call.content))
    for tc in openai_tool_calls(call):
        raw = tc["function"]["arguments"]
        arguments = decode_arguments(raw)
        blocks.append(
            ToolUseBlock(
                type="tool_use",
                id=tc["id"],
                name=tc["function"]["name"],
                input=arguments if isinstance(arguments, dict) else {},
                raw_input=raw,
            )
        )
    if not blocks:
        blocks.append(TextBlock(type="text", text=""))
    usage = ChatUsage(
        input_tokens=len(call.prompt_ids),
        output_tokens=len(call.response_ids),
        time=time.perf_counter() - started,
    )
    return ChatResponse(content=blocks, usage=usage)


@cache
def agentscope_model_tuner_class() -> type[ModelTuner]:
    """A `ModelTuner` subclass that is also an AgentScope `ChatModelBase`."""
    from agentscope.model import ChatModelBase

    class AgentScopeModelTuner(ModelTuner, ChatModelBase):
        """`await model_tuner(messages, tools=..., tool_choice=...)` as AgentScope calls it; sampling
        options among the keyword arguments (`temperature=0.5`) apply to this call."""

        def __init__(self, **kwargs: Any) -> None:
            ModelTuner.__init__(self, **kwargs)
            ChatModelBase.__init__(self, model_name="astuner", stream=False)

        async def __call__(
            self,
            messages: list[dict[str, Any]],
            tools: list[dict[str, Any]] | None = None,
            tool_choice: str | None = None,
            structured_model: Any = None,
            **kwargs: Any,
        ) -> Any:
            started = time.perf_counter()
            warn_if_unconfined_python_tool(tools)  # AgentScope's own runs model code unconfined
            if tool_choice is not None:
                self._validate_tool_choice(tool_choice, tools)
            offered = None if tool_choice == "none" else tools
            call = await self.chat(messages, offered, **sampling_overrides(kwargs))
            return to_chat_response(call, started)

    return AgentScopeModelTuner


def installed_agentscope_model_tuner_class() -> type[ModelTuner]:
    """The chat-model form of `ModelTuner` for the installed AgentScope major version (1 or 2)."""
    import agentscope

    if int(agentscope.__version__.split(".")[0]) >= 2:
        from astuner.rollout.agentscope2_model import agentscope2_model_tuner_class

        return agentscope2_model_tuner_class()
    return agentscope_model_tuner_class()


def model_tuner_class() -> type[ModelTuner]:
    """`ModelTuner`, or its AgentScope chat-model form once the workflow has imported AgentScope."""
    return installed_agentscope_model_tuner_class() if "agentscope" in sys.modules else ModelTuner
