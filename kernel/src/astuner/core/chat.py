"""Chat messages and chat templates.

Agent frameworks hand us OpenAI-style message dicts whose `content` may be a
list of `{"type": "text", "text": ...}` parts or None (agentscope 2.x does
both). Chat templates expect strings, and some raise or silently render an
empty turn otherwise, so every message is normalised first.

`ChatTemplate` renders with transformers' own `render_jinja_template` (its
hardened sandbox, compiled once per template and cached), so `render` gives
the same text as `tokenizer.apply_chat_template(..., tokenize=False)`
without the tokenizer's argument handling around it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Message = dict[str, Any]

# Keys a chat template may read; anything else (agentscope's `name` on
# system/user turns, ids, metadata) is dropped so that equal conversations
# compare equal and render identically.
_KEPT_KEYS = ("role", "content", "tool_calls", "tool_call_id", "reasoning_content")


def flatten_content(content: Any) -> str:
    """Turn message content into one string.

    None becomes "", a string stays, and a list of parts keeps the text of
    its text parts joined by newlines (the convention vLLM uses for
    string-content templates). Non-text parts (images, audio) have no place
    in a text-only prompt and are dropped.
    """
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping) and part.get("type", "text") == "text":
                texts.append(str(part.get("text", "")))
        return "\n".join(texts)
    return str(content)


def normalize_message(message: Mapping[str, Any]) -> Message:
    """Return a template-ready copy of one OpenAI-style message.

    Content is flattened; `name` is kept on tool messages only (templates
    that show the tool's name read it there); tool calls are copied in the
    OpenAI shape `{"id", "type": "function", "function": {"name", "arguments"}}`.
    """
    out: Message = {}
    for key in _KEPT_KEYS:
        if key in message and message[key] is not None:
            out[key] = message[key]
    out["role"] = str(message.get("role", "user"))
    out["content"] = flatten_content(message.get("content"))
    if out["role"] == "tool" and message.get("name"):
        out["name"] = message["name"]
    if "tool_calls" in out:
        calls = out["tool_calls"]
        if calls:
            out["tool_calls"] = [_normalize_tool_call(tc) for tc in calls]
        else:
            del out["tool_calls"]
    return out


def _normalize_tool_call(tc: Mapping[str, Any]) -> dict[str, Any]:
    fn = tc.get("function", tc)
    return {
        "id": tc.get("id", ""),
        "type": "function",
        "function": {"name": fn.get("name", ""), "arguments": fn.get("arguments", {})},
    }


def normalize_messages(messages: Sequence[Mapping[str, Any]]) -> list[Message]:
    """Template-ready copies of OpenAI-style messages: content flattened to text, `name` kept on tool
    messages only, tool calls in OpenAI's shape `{"id", "type": "function", "function": {...}}`."""
    return [normalize_message(m) for m in messages]


class ChatTemplate:
    """A chat template and the special tokens it is rendered with.

    `special_tokens` are passed to the template as variables
    (`bos_token`, `eos_token`, ...) the way transformers does.
    """

    def __init__(self, source: str, special_tokens: Mapping[str, str] | None = None) -> None:
        # Imported here: transformers takes about a second to import, and most
        # users of this module only normalise messages.
        from transformers.utils.chat_template_utils import render_jinja_template

        self.source = source
        self._render = render_jinja_template
        self._special = dict(special_tokens or {})

    def render(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        add_generation_prompt: bool = False,
        **kwargs: Any,
    ) -> str:
        """Render normalised messages (see `normalize_messages`) to prompt text."""
        rendered, _ = self._render(
            [messages],
            tools=tools or None,
            chat_template=self.source,
            add_generation_prompt=add_generation_prompt,
            **self._special,
            **kwargs,
        )
        return rendered[0]
