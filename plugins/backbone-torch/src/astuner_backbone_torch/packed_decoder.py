"""One decoding step of a Llama-shaped model on a CPU, over weights packed for oneDNN.

A 32-row decoding step of SmolLM2 through transformers' modules spends a
third of its time outside the matmuls: per-module dispatch, a mask built per
call, three projections where one would do. And on a CPU the matmuls
themselves read their weights in the layout `nn.Linear` keeps, not the
blocked layout oneDNN computes from (packing them once saved 12% of the
matmul time, float32 and bfloat16 alike, issue 36). `PackedDecoder` runs
the same computation as the model's own forward, layer by layer, on copies
of the weights fused per layer (query, key and value in one matrix, gate and
up in another) and packed for oneDNN, writing keys and values into the
running batch's `SlotCache` through its own `update`. The result equals the
model's forward up to float rounding (a few units in the last place in
bfloat16: the fused matmuls add in another order).

The copies cost memory (the model's weights once more, in its dtype) and
must follow the weights: `refresh` repacks them all when any weight changed
since it last looked (a parameter's version counter or storage moved), and
the engine calls it before every batch, decoding through the model's own
forward once `.to` took the model off the CPU or to float16. Only models whose forward is exactly this
computation are taken (`packed_decoder` says None otherwise): Llama, Mistral
without a sliding window and Qwen2 families, plain (no PEFT adapters), on a CPU.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from astuner_backbone_torch.kv_cache import SlotCache, takes_slot_cache

# Model types whose decoder layer is: RMSNorm (weight * normalised x, computed in float32), q/k/v
# projections with rotary embeddings, attention, o projection, residual; RMSNorm, SiLU-gated MLP, residual.
_FAMILIES = frozenset({"llama", "mistral", "qwen2"})

# Rows a packed weight is laid out for; any row count runs on it (oneDNN's hint, not a limit).
_PACKED_FOR_ROWS = 32


def packed_decoder(model: Any) -> PackedDecoder | None:
    """A `PackedDecoder` for `model`, or None when its forward is not the computation it runs
    (another family, adapters, sliding windows, a GPU, a dtype other than float32/bfloat16)."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "model_type", None) not in _FAMILIES:
        return None
    if hasattr(model, "peft_config") or not takes_slot_cache(model):
        return None
    if getattr(config, "hidden_act", None) != "silu" or getattr(config, "pretraining_tp", 1) != 1:
        return None
    body = getattr(model, "model", None)
    head = getattr(model, "lm_head", None)
    if body is None or not isinstance(head, torch.nn.Linear) or not hasattr(body, "rotary_emb"):
        return None
    if not _runs_on(head.weight):
        return None
    for layer in body.layers:
        attention, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        if not _linears(attention, "q_proj", "k_proj", "v_proj", "o_proj"):
            return None
        if hasattr(attention, "q_norm") or hasattr(attention, "k_norm"):
            return None
        if not _linears(mlp, "gate_proj", "up_proj", "down_proj"):
            return None
        norms = (layer.input_layernorm, layer.post_attention_layernorm, body.norm)
        if not all(hasattr(norm, "variance_epsilon") and hasattr(norm, "weight") for norm in norms):
            return None
    return PackedDecoder(model)


def _runs_on(weight: torch.Tensor) -> bool:
    """Whether weights like `weight` are ones the packed path computes with: on a CPU, float32 or bfloat16."""
    return weight.device.type == "cpu" and weight.dtype in (torch.float32, torch.bfloat16)


def _linears(module: Any, *names: str) -> bool:
    """Whether `module` has an `nn.Linear` under each of `names`."""
    return module is not None and all(isinstance(getattr(module, n, None), torch.nn.Linear) for n in names)


class _Layer:
    """One decoder layer's weights as the step uses them."""

    def __init__(self, layer: Any, pack: Callable[[torch.Tensor], torch.Tensor]) -> None:
        attention, mlp = layer.self_attn, layer.mlp
        projections = (attention.q_proj, attention.k_proj, attention.v_proj)
        self.qkv = pack(torch.cat([p.weight for p in projections]))
        self.qkv_bias = _fused_bias(projections)
        self.o, self.o_bias = pack(attention.o_proj.weight), attention.o_proj.bias
        self.gate_up = pack(torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]))
        self.gate_up_bias = _fused_bias((mlp.gate_proj, mlp.up_proj))
        self.down, self.down_bias = pack(mlp.down_proj.weight), mlp.down_proj.bias
        self.norm_in, self.norm_post = layer.input_layernorm, layer.post_attention_layernorm
        self.scaling = float(attention.scaling)


class PackedDecoder:
    """Runs one new token per row through a Llama-shaped `model` on fused, packed copies of its weights."""

    def __init__(self, model: Any) -> None:
        self.model = model
        config = model.config
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(getattr(config, "num_key_value_heads", None) or self.heads)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // self.heads)
        self._layers: list[_Layer] = []
        self._head: torch.Tensor | None = None
        self._versions: tuple[tuple[int, int, int], ...] | None = None
        self._packs = _can_pack()

    @torch.inference_mode()
    def refresh(self) -> bool:
        """Rebuild the packed copies if any weight changed since they were made; whether the model
        still runs here (False, copies dropped, once `.to` moved it off the CPU or to another dtype).

        A weight changes in place (its version counter moves: optimizer steps, `copy_`,
        `load_state_dict`) or is replaced under the same parameter (`.to(dtype)`, `.data = ...`:
        its storage moves, the counter does not).
        """
        if not _runs_on(self.model.lm_head.weight):
            self._layers, self._head, self._versions = [], None, None
            return False
        # weights made under inference_mode keep no version counter: their storage still tells a swap
        versions = tuple(
            (id(p), 0 if p.is_inference() else p._version, p.data_ptr()) for p in self.model.parameters()
        )
        if versions == self._versions:
            return True
        self._layers = []  # the old copies go before the new ones are made: one extra copy at most
        self._head = None
        body = self.model.model
        self._layers = [_Layer(layer, self._pack) for layer in body.layers]
        self._head = self._pack(self.model.lm_head.weight)
        self._versions = versions
        return True

    def invalidate(self) -> None:
        """Repack at the next `refresh` whatever the version counters say: writes through `.data`
        and fused optimizers (AdamW's `fused=True`) change weights without moving them."""
        self._versions = None

    def _pack(self, weight: torch.Tensor) -> torch.Tensor:
        """`weight` in oneDNN's layout (a new tensor); as it is where this torch cannot pack."""
        weight = weight.detach()
        return torch.ops.mkldnn._reorder_linear_weight(weight, _PACKED_FOR_ROWS) if self._packs else weight

    def _linear(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        if self._packs:
            return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")
        return F.linear(x, weight, bias)

    @torch.inference_mode()
    def step(
        self, tokens: torch.Tensor, cache: SlotCache, attention: torch.Tensor, positions: torch.Tensor
    ) -> torch.Tensor:
        """Logits `(R, V)` of the next token after `tokens` `(R,)`, each row's keys and values written
        into `cache`. attention `(R, 1, 1, W)`, positions `(R, 1)`: `cache.step_inputs()`."""
        if self._head is None:
            self.refresh()
        body = self.model.model
        rows = tokens.shape[0]
        heads, kv_heads, dim = self.heads, self.kv_heads, self.head_dim
        hidden = body.embed_tokens(tokens)
        cos, sin = body.rotary_emb(hidden[:, None], positions)
        cos, sin = cos[:, 0, None], sin[:, 0, None]  # (R, 1, D): one per row, broadcast over heads
        q_end, k_end = heads * dim, (heads + kv_heads) * dim
        for index, layer in enumerate(self._layers):
            qkv = self._linear(_rms_norm(hidden, layer.norm_in), layer.qkv, layer.qkv_bias)
            # queries and keys rotate together: one set of elementwise ops per layer, not two
            rotated = _rotated(qkv[:, :k_end].view(rows, heads + kv_heads, dim), cos, sin)
            query, key = rotated[:, :heads], rotated[:, heads:]
            value = qkv[:, k_end:].view(rows, kv_heads, dim)
            keys, values = cache.update(key[:, :, None], value[:, :, None], index)
            attended = F.scaled_dot_product_attention(
                query[:, :, None],
                keys,
                values,
                attn_mask=attention,
                scale=layer.scaling,
                enable_gqa=heads != kv_heads,
            )
            hidden = hidden + self._linear(attended.reshape(rows, q_end), layer.o, layer.o_bias)
            gated = self._linear(_rms_norm(hidden, layer.norm_post), layer.gate_up, layer.gate_up_bias)
            gate, up = gated.chunk(2, dim=-1)
            hidden = hidden + self._linear(F.silu(gate) * up, layer.down, layer.down_bias)
        assert self._head is not None
        return self._linear(_rms_norm(hidden, body.norm), self._head, self.model.lm_head.bias)


def _fused_bias(linears: tuple[torch.nn.Linear, ...]) -> torch.Tensor | None:
    """The bias of `linears` fused into one matmul (zeros for those without one); None when none has one."""
    if all(linear.bias is None for linear in linears):
        return None
    biases = [
        linear.bias if linear.bias is not None else linear.weight.new_zeros(linear.out_features)
        for linear in linears
    ]
    return torch.cat(biases).detach()


def _rms_norm(x: torch.Tensor, norm: Any) -> torch.Tensor:
    """`norm(x)` for Llama's RMSNorm (normalised in float32, rounded to x's dtype, times the weight),
    in three ops where the module takes seven."""
    normalised = F.rms_norm(x.float(), (x.shape[-1],), eps=norm.variance_epsilon)
    return norm.weight * normalised.to(x.dtype)


def _rotated(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary position embedding of `x` `(R, heads, D)` at `cos`, `sin` `(R, 1, D)`, the halves
    rotated as transformers' Llama does."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin


def _can_pack() -> bool:
    """Whether this torch has oneDNN's packed linear (CPU builds with mkldnn do)."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        weight = torch.zeros(4, 4)
        packed = torch.ops.mkldnn._reorder_linear_weight(weight, 2)
        torch.ops.mkldnn._linear_pointwise(torch.zeros(2, 4), packed, None, "none", [], "")
    except (RuntimeError, AttributeError):
        return False
    return True
