"""Real tokenizers built in code, for tests that cannot reach the model hub.

Each builder trains a small byte-level BPE (so merges, and with them
retokenisation effects, are real) with the pre-tokenizer regex and special
tokens of a model family, and attaches a chat template written here from
that family's documented format:

- `qwen25_tokenizer()`: Qwen2.5-style ChatML; tools listed in the system
  turn inside `<tools>`, calls as `<tool_call>{json}</tool_call>`, results
  grouped into one user turn of `<tool_response>` blocks.
- `qwen3_tokenizer()`: the same plus Qwen3's reasoning rule: an assistant
  turn keeps its `<think>` block only after the last real user query, and
  the generation prompt may pre-fill an empty think block
  (`enable_thinking=False`).
- `llama3_tokenizer()`: Llama-3-style headers (`<|start_header_id|>role
  <|end_header_id|>`, `<|eot_id|>`), tool calls as a bare JSON object with
  `parameters`, tool results in an `ipython` turn, content trimmed.

Vocabularies are tiny (about 1000 tokens), so the ids differ from the real
models'; the formats, special tokens and tokenisation behaviour match.
"""

from __future__ import annotations

import random
from functools import lru_cache
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

QWEN_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

_QWEN_TOOLS_PREAMBLE = (
    "\\n\\n# Tools\\n\\nYou can call the functions whose signatures are listed below, "
    "one JSON object per line, inside <tools></tools>:\\n<tools>"
)
_QWEN_TOOLS_FOOTER = (
    "\\n</tools>\\n\\nTo call a function, write a JSON object with its name and arguments "
    'inside <tool_call></tool_call> tags:\\n<tool_call>\\n{\\"name\\": <function-name>, '
    '\\"arguments\\": <args-json-object>}\\n</tool_call>'
)

# Shared by both Qwen templates: the system turn (with tools), user, system
# and tool turns. `reasoning` switches on Qwen3's think handling.
_QWEN_TEMPLATE = """
{%- set default_system = DEFAULT_SYSTEM %}
{%- if messages and messages[0].role == 'system' %}
    {%- set system = messages[0].content %}
{%- else %}
    {%- set system = default_system %}
{%- endif %}
{%- if tools %}
    {{- '<|im_start|>system\\n' + (system or '') + 'PREAMBLE' }}
    {%- for tool in tools %}
        {{- '\\n' + (tool | tojson) }}
    {%- endfor %}
    {{- 'FOOTER<|im_end|>\\n' }}
{%- elif system is not none %}
    {{- '<|im_start|>system\\n' + system + '<|im_end|>\\n' }}
{%- endif %}
{%- set ns = namespace(last_query=-1) %}
{%- for message in messages %}
    {%- if message.role == 'user' and not (message.content.startswith('<tool_response>')
        and message.content.endswith('</tool_response>')) %}
        {%- set ns.last_query = loop.index0 %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
    {%- elif message.role == 'assistant' %}
        {%- set content = message.content %}
        REASONING
        {%- if message.tool_calls %}
            {%- for call in message.tool_calls %}
                {%- set fn = call.function if call.function else call %}
                {%- if not loop.first or content %}{{- '\\n' }}{%- endif %}
                {{- '<tool_call>\\n{"name": "' + fn.name + '", "arguments": ' }}
                {%- if fn.arguments is string %}{{- fn.arguments }}
                {%- else %}{{- fn.arguments | tojson }}{%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    GENERATION
{%- endif %}
"""

_QWEN25_ASSISTANT = "{{- '<|im_start|>assistant\\n' + content }}"

# Qwen3: reasoning comes from `reasoning_content` or from a <think> block at
# the start of the content; it is shown only for turns after the last user
# query (the current tool-use loop), and always as an (empty) block on the
# final turn of that loop.
_QWEN3_ASSISTANT = """
        {%- set reasoning = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning = message.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning = content.split('</think>')[0].split('<think>')[-1].strip('\\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query and (loop.last or reasoning) %}
            {{- '<|im_start|>assistant\\n<think>\\n' + reasoning.strip('\\n') + '\\n</think>\\n\\n'
                + content.lstrip('\\n') }}
        {%- else %}
            {{- '<|im_start|>assistant\\n' + content }}
        {%- endif %}
"""
_QWEN3_GENERATION = (
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
)


def _qwen_template(reasoning: bool) -> str:
    text = _QWEN_TEMPLATE.replace("PREAMBLE", _QWEN_TOOLS_PREAMBLE).replace("FOOTER", _QWEN_TOOLS_FOOTER)
    if reasoning:
        text = text.replace("DEFAULT_SYSTEM", "none")
        text = text.replace("REASONING", _QWEN3_ASSISTANT)
        text = text.replace("GENERATION", _QWEN3_GENERATION)
    else:
        text = text.replace("DEFAULT_SYSTEM", "'You are a helpful assistant.'")
        text = text.replace("REASONING", _QWEN25_ASSISTANT)
        text = text.replace("GENERATION", "")
    return text


QWEN25_TEMPLATE = _qwen_template(reasoning=False)
QWEN3_TEMPLATE = _qwen_template(reasoning=True)

LLAMA3_TEMPLATE = """
{{- bos_token }}
{%- if messages and messages[0].role == 'system' %}
    {%- set system = messages[0].content | trim %}
    {%- set rest = messages[1:] %}
{%- else %}
    {%- set system = '' %}
    {%- set rest = messages %}
{%- endif %}
{%- if system or tools %}
    {{- '<|start_header_id|>system<|end_header_id|>\\n\\n' + system }}
    {%- if tools %}
        {{- ('\\n\\n' if system else '') + 'You may call the functions below. To call one, '
            + 'reply with only a JSON object {"name": function name, "parameters": '
            + 'object of argument values}.\\n\\n' }}
        {%- for tool in tools %}
            {{- tool | tojson(indent=4) }}{{- '\\n\\n' }}
        {%- endfor %}
    {%- endif %}
    {{- '<|eot_id|>' }}
{%- endif %}
{%- for message in rest %}
    {%- if message.role == 'assistant' and message.tool_calls %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
        {%- for call in message.tool_calls %}
            {%- set fn = call.function if call.function else call %}
            {%- if not loop.first %}{{- '\\n' }}{%- endif %}
            {{- '{"name": "' + fn.name + '", "parameters": ' }}
            {%- if fn.arguments is string %}{{- fn.arguments }}
            {%- else %}{{- fn.arguments | tojson }}{%- endif %}
            {{- '}' }}
        {%- endfor %}
        {{- '<|eot_id|>' }}
    {%- elif message.role == 'tool' %}
        {{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + message.content | trim
            + '<|eot_id|>' }}
    {%- else %}
        {{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n'
            + message.content | trim + '<|eot_id|>' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}
{%- endif %}
"""

_WORDS = [
    "the",
    "a",
    "to",
    "of",
    "and",
    "is",
    "in",
    "it",
    "for",
    "on",
    "with",
    "as",
    "was",
    "at",
    "by",
    "an",
    "be",
    "this",
    "that",
    "from",
    "or",
    "are",
    "not",
    "have",
    "what",
    "you",
    "can",
    "answer",
    "tool",
    "call",
    "result",
    "number",
    "sum",
    "compute",
    "search",
    "weather",
    "city",
    "temperature",
    "file",
    "python",
    "code",
    "print",
    "error",
    "return",
    "value",
    "list",
    "json",
    "name",
    "arguments",
    "query",
    "think",
    "step",
    "first",
    "then",
    "final",
    "so",
    "let",
    "me",
    "check",
    "the",
    "output",
    "shows",
    "we",
    "need",
    "to",
    "use",
    "I",
    "will",
    "user",
    "assistant",
    "system",
    "function",
    "response",
    "observation",
    "action",
    "thought",
    "done",
    "because",
]


def _corpus(seed: int = 0, lines: int = 2000) -> list[str]:
    """Text shaped like agent conversations: prose, numbers, JSON, code."""
    rng = random.Random(seed)
    out = []
    for i in range(lines):
        words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 16)))
        if i % 4 == 0:
            args = f'{{"query": "{rng.choice(_WORDS)} {rng.choice(_WORDS)}", "n": {i}}}'
            out.append(f'{{"name": "{rng.choice(_WORDS)}", "arguments": {args}}}\n')
        elif i % 4 == 1:
            out.append(f"print({rng.randint(0, 999)} * {rng.randint(0, 99)})\n")
        out.append(f"{words.capitalize()} {rng.randint(0, 99999)}.\n")
    return out


def _train(split: str, vocab_size: int) -> Tokenizer:
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(split), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tk.train_from_iterator(_corpus(), trainer)
    return tk


def _wrap(tk: Tokenizer, template: str, **special: str | None) -> Any:
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=tk, chat_template=template, **special)


def _qwen(template: str) -> Any:
    tk = _train(QWEN_SPLIT, 1000)
    tk.add_special_tokens(
        [AddedToken(t, special=True) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>")]
    )
    # As in Qwen2.5/Qwen3, the tool and think tags are single tokens but not special,
    # so they survive decoding with skip_special_tokens.
    tk.add_tokens(
        [
            AddedToken(t, special=False, normalized=False)
            for t in (
                "<tool_call>",
                "</tool_call>",
                "<tool_response>",
                "</tool_response>",
                "<think>",
                "</think>",
            )
        ]
    )
    return _wrap(tk, template, eos_token="<|im_end|>", pad_token="<|endoftext|>")


@lru_cache(maxsize=1)
def qwen25_tokenizer() -> Any:
    """A Qwen2.5-style ChatML `PreTrainedTokenizerFast` (cached per process)."""
    return _qwen(QWEN25_TEMPLATE)


@lru_cache(maxsize=1)
def qwen3_tokenizer() -> Any:
    """A Qwen3-style ChatML `PreTrainedTokenizerFast` with think handling."""
    return _qwen(QWEN3_TEMPLATE)


@lru_cache(maxsize=1)
def llama3_tokenizer() -> Any:
    """A Llama-3-style `PreTrainedTokenizerFast`."""
    tk = _train(LLAMA3_SPLIT, 1000)
    tk.add_special_tokens(
        [
            AddedToken(t, special=True)
            for t in (
                "<|begin_of_text|>",
                "<|end_of_text|>",
                "<|start_header_id|>",
                "<|end_header_id|>",
                "<|eot_id|>",
                "<|eom_id|>",
                "<|python_tag|>",
            )
        ]
    )
    return _wrap(
        tk,
        LLAMA3_TEMPLATE,
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
        pad_token="<|end_of_text|>",
    )
