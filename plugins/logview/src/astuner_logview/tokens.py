"""What the trajectory view shows: the conversation turn by turn, and every training token.

Training samples and advantages come from `RunRecords.what_trained`, built
by the kernel's own merging and advantage code, so the token view is what
the loss sees: each token with its id, decoded text, loss mask and sampling
log-prob, the boundaries where one call's response starts inside a merged
sample, and the prefix breaks: where a call's prompt stopped extending an
earlier sample, marked in both samples at the first differing token.
The advantage is computed over the trajectory's group with the run's
estimator, as the trainer would for that group (per agent, when the judge
scored agents on their own). Every call, sample and agent carries its
agent's name and the LoRA adapter that generated it (None: no adapter, the
policy or base model), so the page can show one agent at a time.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from astuner.api import ChatTokenizer, LLMCall, RunRecords, Trajectory

_BREAK_FIELDS = ("call", "sample", "previous_call", "position", "reason", "message", "role", "note")


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
                    self._loaded[path] = (RunRecords.decoding_tokenizer(path), None)
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


def break_view(brk: dict[str, Any]) -> dict[str, Any]:
    """A prefix break (`WhatTrained.breaks`) as the page shows it, with its sentence for people (`note`)."""
    return {key: brk[key] for key in _BREAK_FIELDS}


def break_markers(sample: dict[str, Any], breaks: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The breaks to mark in `sample`, by token position.

    `starts`: the sample's first call did not extend sample `sample`; its
    prompt differs from that sample's ids from `position` on. `parted`: a
    later call's prompt differs from this sample from `position` on.
    Samples are matched by call index, so the marks stay right when samples
    are filtered or reordered.
    """
    calls = set(sample["call_indices"])
    markers = []
    for brk in breaks:
        if sample["call_indices"] and sample["call_indices"][0] == brk["call"]:
            markers.append({"kind": "starts", **break_view(brk)})
        elif brk["previous_call"] in calls:
            markers.append({"kind": "parted", **break_view(brk)})
    return markers


def adapter_of(call: LLMCall) -> str | None:
    """The LoRA adapter that generated a call; None for none (or a record that did not keep it)."""
    return call.sampling.adapter if call.sampling is not None else None


def sample_view(
    sample: dict[str, Any], tokenizer: ChatTokenizer | None, breaks: Sequence[dict[str, Any]] = ()
) -> dict[str, Any]:
    """One sample (`WhatTrained.samples`) as columns of equal length `T`: ids, text (or null), mask,
    logprob (null off-mask), and the prefix breaks to mark in it (see `break_markers`); `adapters`:
    those of its calls."""
    logprobs, mask = sample["old_logprobs"], sample["loss_mask"]
    adapters = (s["adapter"] if s is not None else None for s in sample["response_sampling"])
    return {
        "agent": sample["agent_name"],
        "adapters": list(dict.fromkeys(adapters)),
        "calls": sample["call_indices"],
        "ids": sample["input_ids"],
        "text": token_texts(tokenizer, sample["input_ids"]),
        "mask": mask,
        "logprobs": [(logprobs[t] if logprobs is not None and m else None) for t, m in enumerate(mask)],
        "spans": [list(span) for span in sample["response_spans"]],
        "advantages": sample["advantages"],
        "trained_tokens": sample["trained_tokens"],
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


def agent_views(
    trajectory: Trajectory,
    samples: Sequence[dict[str, Any]],
    advantages: dict[int, float],
    zero_variance: dict[str, bool],
) -> list[dict[str, Any]]:
    """One entry per agent, in order of its first call (then agents the judge scored that made none):
    its calls, adapters, samples, own reward (None without per-agent rewards), the advantages of its
    trained calls, and whether its group had no reward variance (`zero_variance`, by agent)."""
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
            "samples": sum(s["agent_name"] == name for s in samples),
            "reward": trajectory.agent_rewards.get(name),
            "advantages": [advantages[c.index] for c in own if c.index in advantages],
            "zero_variance": zero_variance[name],
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
    trained = RunRecords.what_trained(trajectory, group, estimator, gamma)
    advantage: dict[str, Any] = {"estimator": estimator, "group_size": len(group), "steps": None}
    if trained.advantage_error is not None:
        advantage["error"] = trained.advantage_error
    else:
        advantage["steps"] = trained.step_advantages
        advantage["zero_variance"] = trained.zero_variance()
    names = [*(c.agent_name for c in trajectory.calls), *trajectory.agent_rewards]
    agents = agent_views(
        trajectory, trained.samples, trained.advantages, {n: trained.zero_variance(n) for n in names}
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
            "calls": trained.merge["calls"],
            "samples": trained.merge["samples"],
            "tokens": trained.merge["tokens_trained"],
            "tokens_unmerged": trained.merge["tokens_unmerged"],
            "drifts": trained.merge["drifts"],
            "breaks": [break_view(b) for b in trained.breaks],
        },
        "turns": conversation(trajectory.calls, trained.advantages),
        "clipped_characters": trained.clipped_characters,
        "samples": [sample_view(s, tokenizer, trained.breaks) for s in trained.samples],
    }
