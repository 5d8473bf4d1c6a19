"""Which dtype decodes faster on this machine: measured once, then remembered.

Whether bfloat16 beats float32 for decoding depends on the CPU (AMX tiles,
AVX512-BF16 or neither), the torch build and the model's shapes, and it is
not what the matmul peak suggests: small decoding batches are bound by
memory traffic and per-op overhead as much as by arithmetic. So `gen_dtype:
auto` on a CPU runs a few decoding steps of the real model in each dtype
(`RunningBatch`, the engine's own loop) and keeps the faster; the verdict is
cached per machine, torch version and model shape, so the probe costs a few
seconds once. On a GPU, auto is bfloat16 where supported, without a probe.
"""

from __future__ import annotations

import copy
import hashlib
import json
import platform
import time
from pathlib import Path
from typing import Any

import torch

from astuner.api import get_logger
from astuner.training import cache_dir
from astuner_backbone_torch.decoding import RunningBatch, Sampler

PROBE_ROWS = 32
PROBE_PROMPT = 64
PROBE_STEPS = 12
# bfloat16 must win by this much: the rollout copy costs memory and a sync every step.
MARGIN = 0.9


def probe_cache_file() -> Path:
    return cache_dir() / "probes" / "gen_dtype.json"


def machine_key(model: Any) -> str:
    """CPU model and flags, thread count, torch version and the model's shape."""
    cpu = _cpu_description()
    shape = json.dumps(model.config.to_diff_dict(), sort_keys=True, default=str)
    text = "|".join([cpu, platform.machine(), str(torch.get_num_threads()), torch.__version__, shape])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def decode_seconds(model: Any, rows: int = PROBE_ROWS, steps: int = PROBE_STEPS) -> float:
    """Seconds per decoding step of `rows` sequences (after a prefill that is not counted)."""
    generator = torch.Generator().manual_seed(0)
    vocab = int(model.config.vocab_size)
    prompts = torch.randint(10, vocab, (rows, PROBE_PROMPT), generator=generator).tolist()
    batch = RunningBatch(model, Sampler(), pad_id=0)
    batch.add(prompts, [steps + 2] * rows, [frozenset()] * rows)
    batch.step()  # the first token comes from the prefill; warm the decode path once more
    batch.step()
    began = time.perf_counter()
    for _ in range(steps):
        batch.step()
    return (time.perf_counter() - began) / steps


def fastest_cpu_dtype(model: Any) -> torch.dtype:
    """float32 or bfloat16 for decoding `model` (float32 weights, on the CPU): cached, else measured."""
    key = machine_key(model)
    path = probe_cache_file()
    known = _read(path)
    if key in known:
        return getattr(torch, known[key]["dtype"])
    with torch.inference_mode():
        fp32 = decode_seconds(model)
        bf16 = decode_seconds(copy.deepcopy(model).to(torch.bfloat16))
    chosen = "bfloat16" if bf16 < MARGIN * fp32 else "float32"
    get_logger().info(
        "generation dtype probed",
        float32_ms_per_step=round(fp32 * 1000, 1),
        bfloat16_ms_per_step=round(bf16 * 1000, 1),
        chosen=chosen,
        cached_in=str(path),
    )
    known[key] = {"dtype": chosen, "float32_s": fp32, "bfloat16_s": bf16, "cpu": _cpu_description()}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(known, indent=1))
    tmp.replace(path)
    return getattr(torch, chosen)


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
