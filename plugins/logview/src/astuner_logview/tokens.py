"""What the trajectory view shows: the conversation turn by turn, and every training token.

Training samples are built exactly as a backbone builds them
(`merge_trajectory`), so the token view is what the loss sees: each token
with its id, decoded text, loss mask and sampling log-prob, the
boundaries where one call's response starts inside a merged sample, and
the prefix breaks: where a call's prompt stopped extending an earlier
sample, marked in both samples at the first differing token.
The advantage is computed over the trajectory's group with the run's
estimator, as the trainer would for that group (per agent, when the judge
scored agents on their own). Every call, sample and agent carries its
agent's name and the LoRA adapter that generated it (None: no adapter, the
policy or base model), so the page can show one agent at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from astuner.api import (
    BUILTIN_PREFIX,
    ChatTokenizer,
    LLMCall,
    PrefixBreak,
    Sample,
    Trajectory,
    clipped_characters,
    compute_advantages,
    load_tokenizer,
    merge_trajectory,
)

_TOKENIZER_FILES = ["*.json", "*.jinja", "*.model", "*.txt", "*.tiktoken"]


def local_tokenizer(path: str) -> ChatTokenizer:
    """Load a tokenizer without touching the network: a folder, a builtin, or a hub name already cached.

    The viewer must work offline and answer at once; asking the hub for a
    name it cannot reach would stall every trajectory view on retries.
    """
    if path.startswith(BUILTIN_PREFIX) or Path(path).expanduser().is_dir():
        return load_tokenizer(path)
    from huggingface_hub import snapshot_download

    try:
        folder = snapshot_download(path, local_files_only=True, allow_patterns=_TOKENIZER_FILES)
    except Exception as exc:
        raise FileNotFoundError(
            f"{path!r} is neither a folder nor a model in the local HuggingFace cache "
            f"({type(exc).__name__}); start the viewer with --tokenizer FOLDER"
        ) from None
    return load_tokenizer(folder)


class TokenizerCache:
    """Tokenizers by path, loaded once; a path that fails is remembered with its error."""

    def __init__(self) -> None:
        self._loaded: dict[str, tuple[ChatTokenizer | None, str | None]] = {}
        self._lock = threading.Lock()

    def get(self, path: str) -> tuple[ChatTokenizer | None, str | None]:
        """`(tokenizer, None)`, or `(None, why it could not be loaded)`."""
        with self._lock:
            if path not in self._loaded:
                try:
                    self._loaded[path] = (local_tokenizer(path), None)
                except Exception as exc:
                    self._loaded[path] = (None, f"{type(exc).__name__}: {exc}")
            return self._loaded[path]

    def prefetch(self, path: str) -> None:
        """Start loading `path` in the background (importing transformers takes seconds)."""
        if path and path not in self._loaded:
            threading.Thread(target=self.get, args=(path,), name="logview-tokenizer", daemon=True).start()


def token_texts(tokenizer: ChatTokenizer | None, ids: Sequence[int]) -> list[str] | None:
    """Each token decoded on its own (special tokens kept); None without a tokenizer.

    A character split over several byte-level tokens shows as U+FFFD on
    each of them, as per-token decoding must.
    """
    if tokenizer is None:
        return None
    unique = sorted(set(ids))
    texts = tokenizer.hf.backend_tokenizer.decode_batch([[i] for i in unique], skip_special_tokens=False)
    by_id = dict(zip(unique, texts, strict=True))
    return [by_id[i] for i in ids]


def break_view(brk: PrefixBreak) -> dict[str, Any]:
    """A prefix break as JSON, with a sentence for people (`note`)."""
    return {
        "call": brk.call,
        "sample": brk.sample,
        "previous_call": brk.previous_call,
        "position": brk.position,
        "reason": brk.reason,
        "message": brk.message,
        "role": brk.role,
        "note": brk.describe(),
    }


def break_markers(sample: Sample, breaks: Sequence[PrefixBreak]) -> list[dict[str, Any]]:
    """The breaks to mark in `sample`, by token position.

    `starts`: the sample's first call did not extend sample `sample`; its
    prompt differs from that sample's ids from `position` on. `parted`: a
    later call's prompt differs from this sample from `position` on.
    Samples are matched by call index, so the marks stay right when samples
    are filtered or reordered.
    """
    calls = set(sample.call_indices)
    markers = []
    for brk in breaks:
        if sample.call_indices and sample.call_indices[0] == brk.call:
            markers.append({"kind": "starts", **break_view(brk)})
        elif brk.previous_call in calls:
            markers.append({"kind": "parted", **break_view(brk)})
    return markers


def adapter_of(call: LLMCall) -> str | None:
    """The LoRA adapter that generated a call; None for none (or a record that did not keep it)."""
    return call.sampling.adapter if call.sampling is not None else None


def sample_view(
    sample: Sample, tokenizer: ChatTokenizer | None, breaks: Sequence[PrefixBreak] = ()
) -> dict[str, Any]:
    """One sample as columns of equal length `T`: ids, text (or null), mask, logprob (null off-mask),
    and the prefix breaks to mark in it (see `break_markers`); `adapters`: those of its calls."""
    logprobs = sample.old_logprobs
    adapters = (s.adapter if s is not None else None for s in sample.response_sampling)
    return {
        "agent": sample.agent_name,
        "adapters": list(dict.fromkeys(adapters)),
        "calls": sample.call_indices,
        "ids": sample.input_ids,
        "text": token_texts(tokenizer, sample.input_ids),
        "mask": sample.loss_mask,
        "logprobs": [
            (logprobs[t] if logprobs is not None and m else None) for t, m in enumerate(sample.loss_mask)
        ],
        "spans": [list(span) for span in sample.response_spans],
        "advantages": sample.advantages,
        "trained_tokens": sample.num_trained_tokens,
        "breaks": break_markers(sample, breaks),
    }


def _response(call: LLMCall) -> dict[str, Any]:
    return {
        "content": call.content,
        "reasoning": call.reasoning,
        "tool_calls": [tc.model_dump() for tc in call.tool_calls],
        "tool_call_errors": [e.model_dump() for e in call.tool_call_errors],
        "tool_parse_error": call.tool_parse_error,
        "finish_reason": call.finish_reason,
        "policy_version": call.policy_version,
        "trainable": call.trainable,
        "madness": call.madness,
        "prompt_tokens": len(call.prompt_ids),
        "prompt_ids_omitted": call.prompt_ids_omitted,
        "response_tokens": len(call.response_ids),
    }


def conversation(calls: Sequence[LLMCall], advantages: dict[int, float]) -> list[dict[str, Any]]:
    """Each call's messages not already shown by the same agent's previous call, then its reply.

    A call usually repeats its agent's whole history; only what is new
    (tool results, user turns) is kept, and the previous reply, which comes
    back as an assistant message, is not shown twice. `advantages` holds
    each trained call's advantage by call index.
    """
    shown: dict[str, list[dict[str, Any]]] = {}
    turns = []
    for call in calls:
        before = shown.get(call.agent_name, [])
        common = 0
        while common < min(len(before), len(call.messages)) and before[common] == call.messages[common]:
            common += 1
        new = call.messages[common:]
        if common == len(before) and before and new and new[0].get("role") == "assistant":
            new = new[1:]
        shown[call.agent_name] = list(call.messages)
        turns.append(
            {
                "call": call.index,
                "agent": call.agent_name,
                "adapter": adapter_of(call),
                "advantage": advantages.get(call.index),
                "tools": [t.get("function", t).get("name", "") for t in call.tools or []],
                "messages": new,
                "response": _response(call),
            }
        )
    return turns


def call_advantages(samples: Sequence[Sample]) -> dict[int, float]:
    """Each trained call's advantage by call index, read off its first generated token."""
    return {call: s.advantages[a] for s in samples for a, b, call in s.response_spans if b > a}


def agent_views(
    trajectory: Trajectory, samples: Sequence[Sample], advantages: dict[int, float], flat: Sequence[str]
) -> list[dict[str, Any]]:
    """One entry per agent, in order of its first call (then agents the judge scored that made none):
    its calls, adapters, samples, own reward (None without per-agent rewards), the advantages of its
    trained calls, and whether its group had no reward variance (`flat`: the zero-variance groups)."""
    calls: dict[str, list[LLMCall]] = {}
    for call in trajectory.calls:
        calls.setdefault(call.agent_name, []).append(call)
    for name in trajectory.agent_rewards:
        calls.setdefault(name, [])
    return [
        {
            "name": name,
            "calls": len(own),
            "adapters": list(dict.fromkeys(adapter_of(c) for c in own)),
            "samples": sum(s.agent_name == name for s in samples),
            "reward": trajectory.agent_rewards.get(name),
            "advantages": [advantages[c.index] for c in own if c.index in advantages],
            "zero_variance": f"{trajectory.group_id}/{name}" in flat,
        }
        for name, own in calls.items()
    ]


def trajectory_view(
    trajectory: Trajectory,
    group: Sequence[Trajectory],
    tokenizer: ChatTokenizer | None,
    estimator: str,
    gamma: float,
) -> dict[str, Any]:
    """Everything the trajectory page shows, with token ids replaced by the samples' columns."""
    samples, report = merge_trajectory(trajectory)
    advantage: dict[str, Any] = {"estimator": estimator, "group_size": len(group), "steps": None}
    advantages: dict[int, float] = {}
    flat: list[str] = []
    try:
        adv = compute_advantages(group, samples, estimator=estimator, gamma=gamma)
    except (KeyError, ValueError) as exc:
        advantage["error"] = str(exc)
    else:
        samples = adv.samples or samples
        advantages, flat = call_advantages(adv.samples), adv.zero_variance_groups
        advantage["steps"] = adv.step_advantages.get(trajectory.trajectory_id)
    agents = agent_views(trajectory, samples, advantages, flat)
    if "error" not in advantage:
        scored = [a["zero_variance"] for a in agents if a["advantages"]]
        advantage["zero_variance"] = (
            bool(scored) and all(scored) if trajectory.agent_rewards else trajectory.group_id in flat
        )
    return {
        "trajectory_id": trajectory.trajectory_id,
        "task_id": trajectory.task_id,
        "group_id": trajectory.group_id,
        "reward": trajectory.reward,
        "agent_rewards": trajectory.agent_rewards,
        "agents": agents,
        "is_success": trajectory.is_success,
        "madness": trajectory.madness,
        "error": trajectory.error,
        "metrics": trajectory.metrics,
        "timings": trajectory.timings,
        "tracker": trajectory.tracker.model_dump(),
        "metadata": trajectory.metadata,
        "advantage": advantage,
        "merge": {
            "calls": report.calls,
            "samples": report.samples,
            "tokens": report.tokens_trained,
            "tokens_unmerged": report.tokens_unmerged,
            "drifts": report.drifts,
            "breaks": [break_view(b) for b in report.breaks],
        },
        "turns": conversation(trajectory.calls, advantages),
        "clipped_characters": clipped_characters(trajectory),
        "samples": [sample_view(s, tokenizer, report.breaks) for s in samples],
    }
