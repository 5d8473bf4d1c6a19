"""Chat messages and chat templates, without the HuggingFace call overhead.

Agent frameworks hand us OpenAI-style message dicts whose `content` may be a
list of `{"type": "text", "text": ...}` parts or None (agentscope 2.x does
both). Chat templates expect strings, and some raise or silently render an
empty turn otherwise, so every message is normalised first.

`ChatTemplate` compiles a template once in a jinja sandbox configured like
`transformers` (`trim_blocks`, `lstrip_blocks`, `tojson`, `raise_exception`,
`strftime_now`, the `{% generation %}` tag) so that `render` gives the same
text as `tokenizer.apply_chat_template(..., tokenize=False)`, at a fraction
of the cost per call.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

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
    """`normalize_message` over a conversation."""
    return [normalize_message(m) for m in messages]


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # transformers' tojson: unlike jinja's built-in it does not HTML-escape.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` renders its body unchanged.

    transformers uses the tag to compute assistant masks; we get masks from
    token ids instead, but templates that contain it must still compile.
    """

    tags: ClassVar[set[str]] = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def _environment() -> ImmutableSandboxedEnvironment:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_GenerationTag, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


class ChatTemplate:
    """A compiled chat template.

    `special_tokens` are passed to the template as variables
    (`bos_token`, `eos_token`, ...) the way transformers does.
    """

    def __init__(self, source: str, special_tokens: Mapping[str, str] | None = None) -> None:
        self.source = source
        self._template = _environment().from_string(source)
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
        return self._template.render(
            messages=messages,
            tools=tools or None,
            add_generation_prompt=add_generation_prompt,
            **self._special,
            **kwargs,
        )
