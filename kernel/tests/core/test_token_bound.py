"""The tracker tells a prompt too long to fit by its size, before encoding it, and never wrongly.

Real tokenizers throughout: the tiny byte-level BPEs built in `astuner.testing` and SmolLM2's.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable

import pytest
from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

from astuner.core.demonstrations import DemonstrationError, demonstration_trajectory
from astuner.core.token_bound import max_token_bytes, surely_longer
from astuner.core.tokenizer import ChatTokenizer
from astuner.core.tracker import ContextTracker, TrackerSettings
from astuner.testing.tokenizers import QWEN25_TEMPLATE, qwen25_tokenizer

MAX_MODEL_LEN = 2000
SETTINGS = TrackerSettings(max_model_len=MAX_MODEL_LEN, max_response_length_in_one_turn=100)


def varied_text(seed: int, size: int) -> str:
    """Prose, numbers, JSON, runs of spaces, accents, CJK, emoji and special-token text."""
    rng = random.Random(seed)
    pieces = [
        "The quick brown fox jumps over the lazy dog. ",
        '{"name": "search", "arguments": {"query": "x"}}\n',
        " " * 40,
        "\n\n\t",
        "123456789",
        "déjà vu, naïve café ",
        "数据集和模型",
        "🙂🚀",
        "<|im_start|>",
        "<|im_end|>",
        "</tool_response>",
        "#" * 80,
        "\n" + " " * 80,
    ]
    out = []
    while sum(map(len, out)) < size:
        out.append(rng.choice(pieces))
    return "".join(out)


def body(tracker: ContextTracker, size: int) -> str:
    """A user message whose conversation renders to exactly `size` UTF-8 bytes."""

    def rendered(content: str) -> int:
        messages = [{"role": "user", "content": content}]
        return len(tracker.render(messages, None, True).encode())

    return "w" * (size - rendered(""))


@pytest.mark.parametrize("name", ["smollm2", "qwen25", "qwen3", "llama3"])
def test_no_text_encodes_to_fewer_tokens_than_the_bound_says(tokenizers, name: str) -> None:
    tok = tokenizers[name]
    per_token = max_token_bytes(tok)
    assert per_token is not None
    for seed in range(20):
        text = varied_text(seed, 5_000)
        n = len(tok.encode(text))
        assert not surely_longer(tok, text, n), f"{name}: {len(text.encode())} bytes, {n} tokens"
        masked = tok.render([{"role": "user", "content": text}], add_generation_prompt=True)
        assert not surely_longer(tok, masked, len(tok.encode(masked))), name


def test_byte_level_entries_count_the_bytes_they_stand_for(smollm2, qwen25) -> None:
    # SmolLM2's longest entry, 'Ċ' and 80 'Ġ', is a newline and 80 spaces: 81 bytes (161 in UTF-8).
    assert smollm2.encode("\n" + " " * 80) == [smollm2.hf.backend_tokenizer.token_to_id("Ċ" + "Ġ" * 80)]
    assert max_token_bytes(smollm2) == 81
    # The tiny Qwen's longest is the added token </tool_response>; a run of it is the tightest text.
    assert max_token_bytes(qwen25) == len("</tool_response>")
    text = "</tool_response>" * 100
    assert len(qwen25.encode(text)) == 100
    assert not surely_longer(qwen25, text, 100) and surely_longer(qwen25, text + "x", 100)


@pytest.mark.parametrize("name", ["smollm2", "qwen25", "llama3"])
def test_a_prompt_just_within_the_bound_is_encoded_as_before_and_one_byte_more_is_not(
    tokenizers, name: str
) -> None:
    tok = tokenizers[name]
    bound = MAX_MODEL_LEN * max_token_bytes(tok)
    tracker = ContextTracker(tok, SETTINGS)
    at_bound = [{"role": "user", "content": body(tracker, bound)}]
    prep = tracker.prepare(at_bound)
    assert prep.prompt_ids == tok.encode(tracker.render(at_bound, None, True))
    assert prep.prompt_source == "template" and prep.stop_reason == "context_overflow"

    over = [{"role": "user", "content": body(tracker, bound + 1)}]
    prep = tracker.prepare(over)
    assert (prep.prompt_ids, prep.prompt_source, prep.stop_reason) == ([], "none", "context_overflow")
    call = tracker.record(prep)
    assert call.finish_reason == "context_overflow" and not call.trainable and call.prompt_ids == []


def test_a_continuing_call_whose_new_text_alone_cannot_fit_is_not_encoded(qwen25) -> None:
    tracker = ContextTracker(qwen25, SETTINGS)
    messages = [{"role": "user", "content": "Hello."}]
    reply = [*qwen25.encode("Hi."), qwen25.end_of_turn_id]
    first = tracker.record(tracker.prepare(messages), reply, [-0.5] * len(reply))
    messages += [{"role": "assistant", "content": first.content}]
    bound = MAX_MODEL_LEN * max_token_bytes(qwen25)
    # What the delta encodes is the new user turn with ~60 bytes of template around it.
    under = [*messages, {"role": "user", "content": "w" * (bound - 100)}]
    prep = tracker.prepare(under)
    assert prep.prompt_source == "cumulative" and prep.stop_reason == "context_overflow"
    assert prep.prompt_ids[: len(first.prompt_ids) + len(reply)] == first.prompt_ids + reply
    assert prep.prompt_ids == tok_ids_of(tracker, under)

    over = [*messages, {"role": "user", "content": "w" * (bound + 1)}]
    prep = tracker.prepare(over)
    assert (prep.prompt_ids, prep.prompt_source, prep.stop_reason) == ([], "none", "context_overflow")
    assert not prep.drift and not prep.new_context


def tok_ids_of(tracker: ContextTracker, messages: list[dict]) -> list[int]:
    """The prompt the template renders for `messages`: a linear conversation's cumulative ids equal it."""
    return tracker.tokenizer.encode(tracker.render(messages, None, True))


def test_a_demonstration_too_long_by_its_size_says_so_without_a_token_count_of_zero(qwen25) -> None:
    bound = MAX_MODEL_LEN * max_token_bytes(qwen25)
    messages = [{"role": "user", "content": "w" * (bound + 1)}, {"role": "assistant", "content": "Hi."}]
    with pytest.raises(DemonstrationError, match=r"max_model_len \(over 2,000 prompt tokens\)"):
        demonstration_trajectory(qwen25, SETTINGS, messages)


def variant(edit: Callable[[dict], None]) -> ChatTokenizer:
    """The tiny Qwen tokenizer with its pipeline changed by `edit` (on its tokenizer.json)."""
    spec = json.loads(qwen25_tokenizer().backend_tokenizer.to_str())
    edit(spec)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(spec)),
        chat_template=QWEN25_TEMPLATE,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    return ChatTokenizer(hf)


def drop_whitespace(spec: dict) -> None:
    spec["pre_tokenizer"] = {
        "type": "Sequence",
        "pretokenizers": [{"type": "Whitespace"}, spec["pre_tokenizer"]],
    }


def strip(spec: dict) -> None:
    spec["normalizer"] = {"type": "Strip", "strip_left": True, "strip_right": True}


def swallow_spaces(spec: dict) -> None:
    for token in spec["added_tokens"]:
        token["rstrip"] = token["content"] == "<|im_end|>"


def fuse_unknown(spec: dict) -> None:
    # Without the byte-level step, characters outside the vocabulary are unknown: one token for a run.
    spec["pre_tokenizer"] = spec["pre_tokenizer"]["pretokenizers"][0]
    unknown = 1 + max(token["id"] for token in spec["added_tokens"])
    spec["model"]["vocab"]["<unk>"] = unknown
    spec["model"].update(unk_token="<unk>", fuse_unk=True)


@pytest.mark.parametrize(
    ("edit", "text"),
    [
        (drop_whitespace, " " * 5_000 + "hi"),
        (strip, " " * 5_000 + "hi"),
        (swallow_spaces, "<|im_end|>" + " " * 5_000),
        (fuse_unknown, "数据集" * 2_000),
    ],
)
def test_a_tokenizer_that_may_drop_text_has_no_bound_and_its_prompts_are_encoded(
    edit: Callable[[dict], None], text: str
) -> None:
    tok = variant(edit)
    n = len(tok.encode(text))
    assert n <= 2 and len(text.encode()) > n * 16 * 100  # a bound from its vocabulary alone would be wrong
    assert max_token_bytes(tok) is None and not surely_longer(tok, text, n)
    prompt = [{"role": "user", "content": text * 10}]  # over 2,000 × 16 bytes
    tracker = ContextTracker(tok, SETTINGS)
    assert tracker.prepare(prompt).prompt_ids == tok.encode(tracker.render(prompt, None, True))


def test_a_normaliser_that_may_shrink_text_widens_the_bound() -> None:
    tok = variant(lambda spec: spec.update(normalizer={"type": "NFKC"}))
    assert max_token_bytes(tok) == 4 * len("</tool_response>")
    # ' temperature' is one token of 12 bytes; spelled in 4-byte bold letters it is 45 bytes.
    text = " 𝐭𝐞𝐦𝐩𝐞𝐫𝐚𝐭𝐮𝐫𝐞" * 1_000
    n = len(tok.encode(text))
    assert n == 1_000 and len(text.encode()) > n * 16  # the vocabulary's 16 bytes alone would be wrong
    assert not surely_longer(tok, text, n)
