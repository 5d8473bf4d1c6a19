"""Random-weight models built in code, for tests: every code path runs for real in seconds.

Needs torch and transformers (imported when called; the kernel itself never imports torch).
"""

from __future__ import annotations

from pathlib import Path


def save_tiny_qwen2(
    folder: Path,
    *,
    hidden_size: int = 64,
    intermediate_size: int = 128,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    max_position_embeddings: int = 4096,
) -> Path:
    """A two-layer random Qwen2 with `qwen25_tokenizer()`'s real ChatML tokenizer, saved in `folder`.

    Its outputs are noise; the head size is `hidden_size / num_attention_heads` (vLLM's CPU
    attention wants 64 or more).
    """
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from astuner.testing.tokenizers import qwen25_tokenizer

    tokenizer = qwen25_tokenizer()
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=2,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        bos_token_id=None,
    )
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
