"""LangChain (`langchain-openai`'s ChatOpenAI with `bind_tools`) keeps running after a broken tool call."""

from __future__ import annotations

import pytest

pytest.importorskip("langchain_openai")

import httpx
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool, tool
from langchain_openai import ChatOpenAI

from astuner import ModelTuner, WorkflowOutput
from astuner.testing import broken_tool_calls as script

MAX_TURNS = 4


@tool
def multiply(a: int, b: int) -> int:
    """Multiply two integers."""
    return a * b


TOOLS: dict[str, BaseTool] = {multiply.name: multiply}


async def answer(llm: Runnable, messages: list[BaseMessage]) -> AIMessage:
    """LangChain's tool loop: run every tool call of a reply until a reply calls none."""
    for _ in range(MAX_TURNS):
        reply = await llm.ainvoke(messages)
        messages.append(reply)
        if not reply.tool_calls:
            return reply
        for call in reply.tool_calls:
            messages.append(await TOOLS[call["name"]].ainvoke(call))  # a ToolMessage answering call["id"]
    raise AssertionError(f"no final answer in {MAX_TURNS} turns")


async def langchain_workflow(task: dict, model: ModelTuner) -> WorkflowOutput:
    async with httpx.AsyncClient() as http:
        llm = ChatOpenAI(
            model="policy", base_url=model.openai_base_url, api_key="astuner", http_async_client=http
        ).bind_tools(list(TOOLS.values()))
        messages: list[BaseMessage] = [SystemMessage(script.SYSTEM_PROMPT), HumanMessage(task["question"])]
        await answer(llm, messages)
        messages.append(HumanMessage(script.FOLLOW_UP))
        reply = await answer(llm, messages)
    return WorkflowOutput(response=reply.text)


def test_langchain_survives_a_broken_tool_call(run_rollout) -> None:
    script.check_rollout(run_rollout(langchain_workflow))
