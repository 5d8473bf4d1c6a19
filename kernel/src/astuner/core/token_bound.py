"""How few tokens a text can encode to, told without encoding it.

Every token of a tokenizer stands for at most B bytes of the text it
encodes, B being the most bytes any entry of its vocabulary (added tokens
included) stands for; a text of n UTF-8 bytes then encodes to at least n / B
tokens. A prompt whose text is over `limit` × B bytes is thus known to be
over `limit` tokens in the time it takes to count its bytes, where encoding
a 4 MB request takes seconds (minutes on a loaded machine).

The bound may be loose but must never be too tight (that would turn a
prompt that fits into a context overflow), so B is counted generously and
only for pipelines whose every step is known:

- a byte-level vocabulary spells each byte as one character (`Ġ` is the
  space byte), so its entries stand for as many bytes as they have
  characters; any other entry counts its own UTF-8 bytes, never fewer than
  it stands for (`▁` for a space, `<0x0A>` for a byte, a `##` prefix);
- Unicode normal forms and lowercasing shrink text by at most 4 (a 4-byte
  mathematical letter becomes one ASCII letter), so B is multiplied by that;
- a step that can drop text of any length (pre-tokenisers that drop
  whitespace, stripping or deleting normalisers, added tokens that swallow
  the spaces around them, fused unknown tokens, WordPiece and WordLevel
  models, truncation) leaves the tokenizer without a bound: its prompts are
  always encoded.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any
from weakref import WeakKeyDictionary

from tokenizers import pre_tokenizers

from astuner.core.tokenizer import LITERAL_START, ChatTokenizer

_BYTE_CHARS = frozenset(pre_tokenizers.ByteLevel.alphabet())
_SHRINK = {"NFC": 4, "NFD": 4, "NFKC": 4, "NFKD": 4, "Lowercase": 4, "Prepend": 1, "ByteLevel": 1}
_KEEP_TEXT = {"ByteLevel", "Metaspace", "Digits", "UnicodeScripts", "Split", "Punctuation"}
# `ChatTokenizer.render` writes special-token text in strings as a stand-in of at most 28 bytes
# (`\ue000`, 16 digits, `\ue001`, each mark maybe JSON-escaped), which `encode` reads back as that
# text: perhaps a single token, so a stand-in's bytes are not counted.
_STAND_IN_BYTES = 28
_FALLBACK_BYTES = [f"<0x{b:02X}>" for b in range(256)]

_measured: WeakKeyDictionary[ChatTokenizer, int | None] = WeakKeyDictionary()


def max_token_bytes(tokenizer: ChatTokenizer) -> int | None:
    """The most bytes of text one token of `tokenizer` stands for, or None when no bound is known.

    Measured once per tokenizer (a walk of its vocabulary) and kept while the tokenizer lives.
    """
    if tokenizer not in _measured:
        _measured[tokenizer] = _measure(json.loads(tokenizer.hf.backend_tokenizer.to_str()))
    return _measured[tokenizer]


class TooLong(ValueError):
    """A text was not encoded: by its size alone it is surely over the limit of tokens."""


def encode_within(tokenizer: ChatTokenizer, text: str, limit: int) -> list[int]:
    """`tokenizer.encode(text)`, or TooLong when the text is surely over `limit` ids by its size.

    Encoding megabytes takes seconds; a text that can never fit need not be encoded to know it.
    """
    if surely_longer(tokenizer, text, limit):
        raise TooLong(f"{len(text):,} characters are surely over {limit:,} tokens")
    return tokenizer.encode(text)


def surely_longer(tokenizer: ChatTokenizer, text: str, limit: int) -> bool:
    """Whether `tokenizer.encode(text)` is surely more than `limit` ids, told without encoding.

    False means only that the bound cannot tell: the text may still encode to more.
    """
    if len(text) * 4 <= limit:  # no more than 4 bytes a character, and B is at least 1
        return False
    per_token = max_token_bytes(tokenizer)
    if per_token is None:
        return False
    size = len(text.encode("utf-8", "surrogatepass"))
    size -= _STAND_IN_BYTES * (text.count(LITERAL_START) + text.count("\\ue000"))
    return size > limit * per_token


def _measure(spec: Mapping[str, Any]) -> int | None:
    shrink = _shrink(spec.get("normalizer"))
    added = spec.get("added_tokens") or []
    entries = _entries(spec.get("model") or {})
    if (
        shrink is None
        or entries is None
        or spec.get("truncation") is not None
        or not _keeps_text(spec.get("pre_tokenizer"))
        or any(token.get("lstrip") or token.get("rstrip") for token in added)
    ):
        return None
    byte_level = _byte_level(spec.get("pre_tokenizer")) or _byte_level(spec.get("normalizer"))
    longest = max(
        4,  # an unknown character, when the model writes one token for it
        *(len(token["content"].encode("utf-8", "surrogatepass")) for token in added),
        *(_entry_bytes(entry, byte_level) for entry in entries),
    )
    return longest * shrink


def _entries(model: Mapping[str, Any]) -> list[str] | None:
    """The model's vocabulary, or None when one token may stand for text of any length."""
    kind = model.get("type")
    if kind == "BPE":
        entries = list(model.get("vocab") or {})
        # Fused unknown tokens cover a whole run of unknown characters, unless byte fallback spells them.
        fused = model.get("unk_token") is not None and model.get("fuse_unk")
        return None if fused and not _spells_bytes(model, entries) else entries
    if kind == "Unigram":
        entries = [piece for piece, _score in model.get("vocab") or []]
        # Unigram fuses unknown characters into one token; only byte fallback keeps them apart.
        return entries if _spells_bytes(model, entries) else None
    return None


def _spells_bytes(model: Mapping[str, Any], entries: list[str]) -> bool:
    return bool(model.get("byte_fallback")) and set(_FALLBACK_BYTES) <= set(entries)


def _shrink(normalizer: Mapping[str, Any] | None) -> int | None:
    """How many times shorter (in bytes) the normaliser may make a text; None: no bound."""
    if normalizer is None:
        return 1
    kind = normalizer.get("type")
    if kind == "Sequence":
        total = 1
        for step in normalizer.get("normalizers") or []:
            factor = _shrink(step)
            if factor is None:
                return None
            total *= factor
        return total
    if kind == "Replace":
        # A literal replaced by text at least as long never shrinks; a pattern or a shorter text may.
        pattern, content = normalizer.get("pattern") or {}, normalizer.get("content") or ""
        literal = pattern.get("String")
        grows = isinstance(literal, str) and literal and len(content.encode()) >= len(literal.encode())
        return 1 if grows else None
    return _SHRINK.get(kind or "")


def _keeps_text(pre_tokenizer: Mapping[str, Any] | None) -> bool:
    """Whether the pre-tokeniser hands every byte of the text on (splits, but never drops)."""
    if pre_tokenizer is None:
        return True
    kind = pre_tokenizer.get("type")
    if kind == "Sequence":
        return all(_keeps_text(step) for step in pre_tokenizer.get("pretokenizers") or [])
    return kind in _KEEP_TEXT and pre_tokenizer.get("behavior") != "Removed"


def _byte_level(step: Mapping[str, Any] | None) -> bool:
    if step is None:
        return False
    nested = step.get("pretokenizers") or step.get("normalizers") or []
    return step.get("type") == "ByteLevel" or any(_byte_level(s) for s in nested)


def _entry_bytes(entry: str, byte_level: bool) -> int:
    if not byte_level:
        return len(entry.encode("utf-8", "surrogatepass"))
    return sum(1 if c in _BYTE_CHARS else len(c.encode("utf-8", "surrogatepass")) for c in entry)
