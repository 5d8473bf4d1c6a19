"""Tokenizer loading, including the SmolLM2 GGUF conversion and its cache."""

from __future__ import annotations

import pytest

from astuner.core.tokenizer import cache_dir, load_tokenizer, smollm2_tokenizer_dir


def test_builtin_smollm2_is_converted_once_and_cached(smollm2):
    folder = smollm2_tokenizer_dir()
    assert folder.parent == cache_dir() / "tokenizers"
    stamp = (folder / "tokenizer.json").stat().st_mtime_ns
    assert smollm2_tokenizer_dir() == folder
    assert (folder / "tokenizer.json").stat().st_mtime_ns == stamp
    # cached per process (not the fixture's object: other tests may have evicted it from the cache)
    assert load_tokenizer("builtin:smollm2-135m-instruct") is load_tokenizer("builtin:smollm2-135m-instruct")


def test_smollm2_tokenizer_facts(smollm2):
    assert len(smollm2.hf) == 49152
    assert smollm2.end_of_turn_id == 2 and smollm2.stop_token_ids == {2}
    assert smollm2.special_token_ids == set(range(17))
    # SmolLM2 splits numbers into single digits.
    assert smollm2.hf.convert_ids_to_tokens(smollm2.encode("x 123")) == ["x", "Ġ", "1", "2", "3"]
    text = "<|im_start|>user\nünïcödé ✓ 6*7=42<|im_end|>\n"
    ids = smollm2.encode(text)
    assert ids[0] == 1 and 2 in ids and smollm2.decode(ids) == text


def test_cache_dir_honours_env(monkeypatch, tmp_path):
    monkeypatch.setenv("ASTUNER_CACHE", str(tmp_path))
    assert cache_dir() == tmp_path


def test_unknown_builtin():
    with pytest.raises(ValueError, match="unknown builtin"):
        load_tokenizer("builtin:gpt-17")


def test_load_saved_folder(qwen25, tmp_path):
    qwen25.hf.save_pretrained(tmp_path)
    tok = load_tokenizer(tmp_path)
    assert tok.encode("hello <tool_call>") == qwen25.encode("hello <tool_call>")
    assert tok.end_of_turn == "<|im_end|>"
