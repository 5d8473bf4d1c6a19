"""The gateway's requests: `chat.completions` bodies checked as OpenAI's API checks them.

A request is checked against `ChatCompletionRequest` before it reaches the
model, so a bad one is a 400 naming its field, as OpenAI's API answers:
`{"error": {"message", "type": "invalid_request_error", "param", "code"}}`.
The model only checks; the tuner gets the request's own messages and tools,
and the sampling fields it sets (`request_sampling`) as the call's overrides.
`top_k` is read as vLLM's servers read it; other fields it does not name
(`frequency_penalty`, `user`, ...) are accepted and ignored, as
OpenAI-compatible servers do with what they lack.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal, Union

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError

# The request fields that override the rollout's sampling for one call (max tokens aside).
_SAMPLING_KEYS = ("temperature", "top_p", "top_k", "seed")

MAX_DEPTH = 128
"""How many levels of arrays and objects a request may nest, the body itself the first.

A chat request needs a handful, a tool's parameter schema two per level
of its properties; a body nested deeper than Python's recursion limit
would break the JSON parser, and one nested a few hundred levels whatever
walks it next (validation, the chat template): a 500, not an answer.
"""

# How many steps of a too deeply nested value's path name its field, by the top-level key
_FIELD_DEPTH = {"messages": 3, "tools": 4}
# A JSON string (escapes skipped whole) or a structural character: enough to follow the nesting
_JSON_TOKEN = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{},:]')


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    return "an array" if isinstance(value, list) else "an object"


def _by_json_type(expected: str, **branches: Any) -> Any:
    """A union whose branch is picked by the input's JSON type (`str`, `list`, `dict`, `null`).

    An input of another type is one error, "expected <expected>", and an
    input of a branch's type is checked by that branch alone, so its error
    names the exact place (`content[0].text`), never every branch's complaint.
    The tags (`<str>`, ...) appear in error locations; `_param` drops them.
    """
    kinds = {"str": str, "list": list, "dict": dict, "null": type(None)}

    def pick(value: Any) -> str | None:
        for name in branches:
            if isinstance(value, kinds[name]):
                return f"<{name}>"
        return None

    members = tuple(Annotated[kind, Tag(f"<{name}>")] for name, kind in branches.items())
    return Annotated[
        Union[members],  # noqa: UP007 - a tuple of members needs the subscript form
        Discriminator(pick, custom_error_type="invalid_type", custom_error_message=f"expected {expected}"),
    ]


class _Strict(BaseModel):
    # JSON types are not coerced ("10" is no integer, 1 no boolean); unknown keys pass.
    model_config = ConfigDict(strict=True, extra="allow")


class _ContentPart(_Strict):
    type: str
    text: str | None = Field(default=None, validate_default=True)

    @field_validator("text")
    @classmethod
    def _text_part_has_text(cls, text: str | None, info: ValidationInfo) -> str | None:
        if text is None and info.data.get("type") == "text":
            raise PydanticCustomError("text_required", "a text content part needs its text")
        return text


class _Function(_Strict):
    name: Annotated[str, Field(min_length=1)]
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class _Tool(_Strict):
    type: Literal["function"]
    function: _Function


_Arguments = _by_json_type("a JSON string or object", str=str, dict=dict[str, Any])


class _CalledFunction(_Strict):
    name: str
    arguments: _Arguments = "{}"


class _ToolCall(_Strict):
    id: str | None = None
    type: Literal["function"] = "function"
    function: _CalledFunction


_Content = _by_json_type(
    "a string, a list of content parts or null", str=str, list=list[_ContentPart], null=None
)


class _Message(_Strict):
    # Role and tool calls come first: the content and tool call id checks read them.
    role: Literal["system", "developer", "user", "assistant", "tool"]
    tool_calls: list[_ToolCall] | None = None
    content: _Content = Field(default=None, validate_default=True)
    name: str | None = None
    tool_call_id: str | None = Field(default=None, validate_default=True)

    @field_validator("tool_call_id")
    @classmethod
    def _tool_result_names_its_call(cls, tool_call_id: str | None, info: ValidationInfo) -> str | None:
        # Without it the result cannot be told apart from another call's, as OpenAI's API requires it.
        if tool_call_id is None and info.data.get("role") == "tool":
            raise PydanticCustomError("missing", "a tool message needs the id of the call it answers")
        return tool_call_id

    @field_validator("content")
    @classmethod
    def _null_only_beside_tool_calls(cls, content: Any, info: ValidationInfo) -> Any:
        role = info.data.get("role")
        if content is None and role is not None and not (role == "assistant" and info.data.get("tool_calls")):
            raise PydanticCustomError(
                "content_required",
                "a message with role '{role}' needs content (a string or a list of content parts); "
                "only an assistant message with tool_calls may have none",
                {"role": role},
            )
        return content


class _StreamOptions(_Strict):
    include_usage: bool | None = None


_MaxTokens = Annotated[int, Field(ge=1)]
_ToolChoice = _by_json_type(
    "'none', 'auto', 'required' or a named tool",
    str=Literal["none", "auto", "required"],
    dict=dict[str, Any],
)
_Stop = _by_json_type("a string or a list of strings", str=str, list=list[str])


class ChatCompletionRequest(_Strict):
    """The fields of a `chat.completions` request the gateway reads, with OpenAI's limits."""

    messages: Annotated[list[_Message], Field(min_length=1)]
    model: str | None = None
    tools: list[_Tool] | None = None
    tool_choice: _ToolChoice | None = None
    temperature: Annotated[float, Field(ge=0, le=2, allow_inf_nan=False)] | None = None
    top_p: Annotated[float, Field(gt=0, le=1, allow_inf_nan=False)] | None = None
    top_k: Annotated[int, Field(ge=-1)] | None = None
    max_tokens: _MaxTokens | None = None
    max_completion_tokens: _MaxTokens | None = None
    n: int | None = None
    seed: Annotated[int, Field(ge=-(2**63), lt=2**63)] | None = None
    stop: _Stop | None = None
    stream: bool | None = None
    stream_options: _StreamOptions | None = None

    @field_validator("tool_choice")
    @classmethod
    def _choice_needs_tools(cls, tool_choice: Any, info: ValidationInfo) -> Any:
        if tool_choice not in (None, "none", "auto") and not info.data.get("tools"):
            raise PydanticCustomError(
                "tools_required",
                "'tool_choice' {shown} is only allowed when 'tools' are specified: send the tools the "
                "model must choose from, or leave 'tool_choice' out",
                {"shown": "'required'" if tool_choice == "required" else "naming a tool"},
            )
        return tool_choice

    @field_validator("n")
    @classmethod
    def _one_choice(cls, n: int | None) -> int | None:
        if n is not None and n < 1:
            raise PydanticCustomError("greater_than_equal", "n must be at least 1")
        if n is not None and n > 1:
            raise PydanticCustomError(
                "unsupported_value", "only n=1 is supported: the gateway samples one choice per request"
            )
        return n


class BadRequest(Exception):
    """A request the gateway answers with a 400: `message` in OpenAI's words, `param` the field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message, self.param = message, param


def _param(loc: tuple[int | str, ...]) -> str | None:
    """An error location as OpenAI names a field: `messages[0].content`."""
    param = ""
    for part in loc:
        if isinstance(part, int):
            param += f"[{part}]"
        elif not part.startswith("<"):  # a `_by_json_type` branch tag
            param += f".{part}" if param else part
    return param or None


_EXPECTED = {
    "string_type": "a string",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "float_type": "a number",
    "bool_type": "a boolean",
    "list_type": "an array",
    "dict_type": "an object",
    "model_type": "an object",
}


def _bad_request(exc: ValidationError) -> BadRequest:
    """The first validation error, worded as OpenAI words it, with what was sent."""
    error = exc.errors(include_url=False)[0]
    param, kind, got = _param(error["loc"]), error["type"], error.get("input")
    if kind == "missing":
        return BadRequest(f"Missing required parameter: '{param}'.", param)
    if kind in _EXPECTED or kind == "invalid_type":
        expected = f"expected {_EXPECTED[kind]}" if kind in _EXPECTED else error["msg"]
        return BadRequest(
            f"Invalid type for '{param}': {expected}, but got {_json_type(got)} instead.", param
        )
    if kind == "too_short":
        unit = "item" if isinstance(got, list) else "character"
        detail = f"expected at least {error['ctx']['min_length']} {unit}(s)"
    else:
        detail = error["msg"][:1].lower() + error["msg"][1:]
    if got is not None:
        shown = json.dumps(got)
        detail += f" (got {shown if len(shown) <= 80 else shown[:77] + '...'})"
    return BadRequest(f"Invalid value for '{param}': {detail}.", param)


def parse_request(raw: bytes) -> tuple[dict[str, Any], ChatCompletionRequest]:
    """The request body as sent and as checked; `BadRequest` if it is not a valid request."""
    # Counted first (fast): only a body with that many brackets can nest too deep to parse.
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:
        _check_depth(raw)
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise BadRequest(f"The request body is not valid JSON: {exc}.") from None
    if not isinstance(body, dict):
        raise BadRequest(f"The request body must be a JSON object, not {_json_type(body)}.")
    _check_text(body)
    try:
        return body, ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        raise _bad_request(exc) from None


def _check_depth(raw: bytes) -> None:
    """`BadRequest` naming the field where `raw` nests deeper than `MAX_DEPTH`, read without parsing it."""
    # One frame per open array or object: its kind, and the key or index being read in it
    frames: list[list[Any]] = []
    key_next = False
    for match in _JSON_TOKEN.finditer(raw):
        token = match.group()
        if token in (b"{", b"["):
            if len(frames) == MAX_DEPTH:
                loc = tuple(position for _, position in frames)
                # the field as OpenAI would name it: `messages[0].content`, `tools[0].function.parameters`
                field = loc[: _FIELD_DEPTH.get(loc[0], 1)]
                raise BadRequest(
                    f"Invalid value for '{_param(field)}': it nests arrays and objects more than "
                    f"{MAX_DEPTH} levels deep (at {_param(loc[:6])}...); a chat request needs far fewer.",
                    _param(field),
                )
            frames.append([token, 0])
            key_next = token == b"{"
        elif token in (b"}", b"]"):
            del frames[-1:]
            key_next = False
        elif token == b",":
            if frames and frames[-1][0] == b"[":
                frames[-1][1] += 1
            key_next = bool(frames) and frames[-1][0] == b"{"
        elif token == b":":
            key_next = False
        elif key_next and frames:
            frames[-1][1] = token[1:-1].decode("utf-8", "replace")


def _check_text(body: dict[str, Any]) -> None:
    """`BadRequest` naming the first string of `body` (keys included) that is not Unicode text.

    JSON's `\\ud800` escape (or those bytes in UTF-8) gives a lone surrogate,
    which no tokenizer, and no UTF-8 encoder, takes.
    """
    stack: list[tuple[tuple[int | str, ...], Any]] = [((), body)]
    while stack:
        loc, value = stack.pop()
        if isinstance(value, dict):
            for key in value:
                _check_string(key, loc)
            stack += reversed([((*loc, key), item) for key, item in value.items()])
        elif isinstance(value, list):
            stack += reversed([((*loc, i), item) for i, item in enumerate(value)])
        elif isinstance(value, str):
            _check_string(value, loc)


def _check_string(text: str, loc: tuple[int | str, ...]) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        param = _param(loc)
        raise BadRequest(
            f"Invalid value for '{param}': it is not valid Unicode text: a lone surrogate "
            f"(\\u{ord(text[exc.start]):04x}) at character {exc.start}. Send text as UTF-8, with any "
            "surrogate escapes in pairs.",
            param,
        ) from None


def request_sampling(checked: ChatCompletionRequest, max_tokens_cap: int) -> dict[str, Any]:
    """The sampling overrides a checked request sets: what it gives of `temperature`, `top_p`,
    `top_k` and `seed`, and its token limit lowered to `max_tokens_cap` (the rollout's)."""
    sampling: dict[str, Any] = {
        key: getattr(checked, key) for key in _SAMPLING_KEYS if getattr(checked, key) is not None
    }
    max_tokens = checked.max_completion_tokens or checked.max_tokens
    if max_tokens is not None:
        sampling["max_tokens"] = min(max_tokens, max_tokens_cap)
    return sampling


def as_system(message: dict[str, Any]) -> dict[str, Any]:
    """A developer message as the system message it is to models without that role."""
    # Chat templates know no developer role (Qwen's drop it), as OpenAI's older models do not.
    return {**message, "role": "system"} if message.get("role") == "developer" else message
