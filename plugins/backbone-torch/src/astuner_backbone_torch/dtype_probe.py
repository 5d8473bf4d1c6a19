"""Which dtypes decode and train faster on this machine: measured once, then remembered.

Whether bfloat16 beats float32 depends on the CPU (AMX tiles, AVX512-BF16
or neither), the torch build and the model's shapes, and it is not what the
matmul peak suggests: small decoding batches are bound by memory traffic
and per-op overhead as much as by arithmetic, and autocast casts the
weights again at every pass. So on a CPU:

- `gen_dtype: auto` runs a few decoding steps of the real model in each
  dtype (`RunningBatch`, the engine's own loop) and keeps the faster;
- `train_dtype: auto` times a few forward and backward passes of the real
  model over one micro-batch, in float32 and under bfloat16 autocast
  (float32 weights and gradients either way, as the update runs them),
  and keeps the faster.

Each verdict is cached per machine, thread count, torch version and model
shape (`probes/<which>.json` under the astuner cache), so a probe costs a few
seconds once. On a GPU, auto is bfloat16 where supported, without a probe.
"""

from __future__ import annotations

import copy
import hashlib
import json
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from astuner.api import get_logger
from astuner.training import cache_dir
from astuner_backbone_torch.decoding import RunningBatch, Sampler
from astuner_backbone_torch.packed_decoder import packed_decoder

PROBE_ROWS = 32
PROBE_PROMPT = 64
PROBE_STEPS = 12
# bfloat16 must win by this much: the rollout copy costs memory and a sync every step.
MARGIN = 0.9

# One micro-batch of the update, each dtype timed this many times in turn, the fastest kept (one
# pass warms up, another may be disturbed). bfloat16's advantage grows with the tokens of a pass: on
# SmolLM2 and 2 AMX cores it is nil at 128, bfloat16 takes 0.5-0.75 of float32's time at 512 and
# 0.53 at 2048 (where a pass takes 11 s in float32); 512 tokens decide in about 9 s.
TRAIN_ROWS = 4
TRAIN_TOKENS = 128
TRAIN_PASSES = 2
# bfloat16 autocast must win by this much: its rounding moves the trainer's log-probs away from
# the engine's (actor/rollout_logprob_gap), which a marginal speed-up does not pay for.
TRAIN_MARGIN = 0.9


def probe_cache_file(which: str = "gen_dtype") -> Path:
    """The file that remembers the verdicts of probe `which` (gen_dtype, train_dtype)."""
    return cache_dir() / "probes" / f"{which}.json"


# Part of every verdict's key: a change to what the probes measure makes old verdicts stale
# (2: decoding steps on the packed decoder).
_PROBE_VERSION = "2"


def machine_key(model: Any) -> str:
    """CPU model and flags, thread count, torch version and the model's shape."""
    cpu = _cpu_description()
    shape = json.dumps(model.config.to_diff_dict(), sort_keys=True, default=str)
    text = "|".join(
        [_PROBE_VERSION, cpu, platform.machine(), str(torch.get_num_threads()), torch.__version__, shape]
    )
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def decode_seconds(model: Any, rows: int = PROBE_ROWS, steps: int = PROBE_STEPS) -> float:
    """Seconds per decoding step of `rows` sequences (after a prefill that is not counted), on the
    packed decoder where the engine would use it."""
    generator = torch.Generator().manual_seed(0)
    vocab = int(model.config.vocab_size)
    prompts = torch.randint(10, vocab, (rows, PROBE_PROMPT), generator=generator).tolist()
    batch = RunningBatch(model, Sampler(), pad_id=0, decoder=packed_decoder(model))
    batch.add(prompts, [steps + 2] * rows, [frozenset()] * rows)
    batch.step()  # the first token comes from the prefill; warm the decode path once more
    batch.step()
    began = time.perf_counter()
    for _ in range(steps):
        batch.step()
    return (time.perf_counter() - began) / steps


def update_seconds(
    model: Any, dtype: torch.dtype, rows: int = TRAIN_ROWS, tokens: int = TRAIN_TOKENS
) -> float:
    """Seconds of one forward and backward of a `rows` x `tokens` micro-batch under autocast to `dtype`
    (float32: none), as the update runs it; `model`'s gradients are dropped after."""
    generator = torch.Generator().manual_seed(0)
    vocab = int(model.config.vocab_size)
    ids = torch.randint(10, vocab, (rows, tokens + 1), generator=generator)
    began = time.perf_counter()
    try:
        with torch.enable_grad():
            with torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32):
                logits = model(input_ids=ids[:, :-1], use_cache=False).logits
            loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), ids[:, 1:].flatten())
            loss.backward()
        return time.perf_counter() - began
    finally:
        model.zero_grad(set_to_none=True)


def fastest_cpu_dtype(model: Any) -> torch.dtype:
    """float32 or bfloat16 for decoding `model` (float32 weights, on the CPU): cached, else measured."""

    def measure() -> tuple[float, float]:
        with torch.inference_mode():
            return decode_seconds(model), decode_seconds(copy.deepcopy(model).to(torch.bfloat16))

    return _verdict("gen_dtype", model, measure, MARGIN, "generation dtype", "ms_per_step", 1000)


def fastest_cpu_train_dtype(model: Any) -> torch.dtype:
    """float32 or bfloat16 autocast for updating `model` (float32 weights, on the CPU): cached, else
    measured."""

    def measure() -> tuple[float, float]:
        timings: dict[torch.dtype, list[float]] = {torch.float32: [], torch.bfloat16: []}
        for _ in range(TRAIN_PASSES):
            for dtype, seconds in timings.items():
                seconds.append(update_seconds(model, dtype))
        return min(timings[torch.float32]), min(timings[torch.bfloat16])

    return _verdict("train_dtype", model, measure, TRAIN_MARGIN, "update dtype", "s_per_micro_batch", 1)


def choose(float32_s: float, bfloat16_s: float, margin: float) -> str:
    """bfloat16 when it takes less than `margin` of float32's time, else float32."""
    return "bfloat16" if bfloat16_s < margin * float32_s else "float32"


def _verdict(
    which: str,
    model: Any,
    measure: Callable[[], tuple[float, float]],
    margin: float,
    what: str,
    unit: str,
    scale: float,
) -> torch.dtype:
    """Probe `which`'s dtype for `model`: the cached verdict, else `measure()`d (float32 and bfloat16
    seconds), chosen with `margin`, logged in `unit` (seconds times `scale`) and remembered."""
    key = machine_key(model)
    path = probe_cache_file(which)
    known = _read(path)
    entry = known.get(key)
    cached = isinstance(entry, dict) and entry.get("dtype") in ("float32", "bfloat16")
    if not cached:
        fp32, bf16 = measure()
        entry = {"dtype": choose(fp32, bf16, margin), "float32_s": fp32, "bfloat16_s": bf16}
        known[key] = {**entry, "cpu": _cpu_description()}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(known, indent=1))
        tmp.replace(path)
    timings = {
        f"{dtype}_{unit}": round(float(entry[f"{dtype}_s"]) * scale, 3)
        for dtype in ("float32", "bfloat16")
        if f"{dtype}_s" in entry
    }
    get_logger().info(
        f"{what} {'cached' if cached else 'probed'}", chosen=entry["dtype"], **timings, cached_in=str(path)
    )
    return getattr(torch, entry["dtype"])


def _read(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _cpu_description() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    fields = dict(
        line.split(":", 1) for line in info.splitlines() if ":" in line and line.split(":", 1)[0].strip()
    )
    named = {k.strip(): v.strip() for k, v in fields.items()}
    return f"{named.get('model name', '')} {named.get('flags', '')}"
