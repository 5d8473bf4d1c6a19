"""The EnvService wire format, shared by the client and the reference server.

Every call is `POST /<endpoint>` with a `ServiceRequest` body and answers
`{"success": bool, "data": ...}`; a request the server cannot serve gets
HTTP 400 with the reason in `detail`, a server fault HTTP 500, and a full
server HTTP 503. `GET /healthz` answers "OK". See the package README for
one example per endpoint.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ServiceRequest(BaseModel):
    """The body of every EnvService call; unused fields are sent as null or `{}`."""

    model_config = ConfigDict(extra="forbid")

    env_type: str = "appworld"
    task_id: str | None = None
    instance_id: str | None = None
    messages: Any = Field(default_factory=dict)
    params: dict[str, Any] = Field(default_factory=dict)


def action_text(action: Any) -> str:
    """The text of an agent action: a string, an OpenAI-style message, or AgentScope content blocks.

    AgentScope replies carry `content` as a list of blocks such as
    `{"type": "text", "text": ...}`; only text blocks count as the action.
    """
    if isinstance(action, dict) and "content" in action:
        action = action["content"]
    if isinstance(action, str):
        return action
    if isinstance(action, list):
        return "\n".join(
            str(block.get("text", "")) if isinstance(block, dict) else str(block)
            for block in action
            if not isinstance(block, dict) or block.get("type", "text") == "text"
        )
    if action is None:
        return ""
    raise TypeError(f"an action must be text or a message with 'content', not {type(action).__name__}")


def as_action_message(action: Any) -> dict[str, Any]:
    """The `messages` field of a `/step` call: `{"role": "assistant", "content": str, "tool_calls"?}`."""
    message: dict[str, Any] = {"role": "assistant", "content": action_text(action)}
    if isinstance(action, dict) and action.get("tool_calls"):
        message["tool_calls"] = action["tool_calls"]
    return message
