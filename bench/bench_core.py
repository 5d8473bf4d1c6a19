"""Benchmark of the trajectory/token core: tracking, merging, tokens saved.

    python bench/bench_core.py [--tokenizer builtin:smollm2-135m-instruct|qwen25|llama3]

Prints, for a scripted 20-call ReAct conversation:
- calls tracked per second and the tracker's time per call (prepare +
  record), in total and without the time spent tokenising (new text in
  cumulative mode, the whole prompt in template mode), per mode;
- microseconds per merge of the whole conversation into samples;
- tokens trained merged vs unmerged on a 5-call episode with 200-token tool
  outputs (the issue's target: at least 3x fewer).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from astuner.core.merge import merge_calls
from astuner.core.tokenizer import ChatTokenizer, load_tokenizer
from astuner.core.tracker import ContextTracker, TrackerSettings
from astuner.testing.conversations import react_turns, run_episode


def _tokenizer(name: str) -> ChatTokenizer:
    if name in ("qwen25", "llama3"):
        from astuner.testing import tokenizers

        return ChatTokenizer(getattr(tokenizers, f"{name}_tokenizer")())
    return load_tokenizer(name)


class _TimedEncode:
    """Wraps `ChatTokenizer.encode` to measure the time spent tokenising."""

    def __init__(self, tok: ChatTokenizer) -> None:
        self.tok, self.inner, self.seconds = tok, tok.encode, 0.0

    def __enter__(self) -> _TimedEncode:
        def encode(text: str) -> list[int]:
            t0 = time.perf_counter()
            out = self.inner(text)
            self.seconds += time.perf_counter() - t0
            return out

        self.tok.encode = encode  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: Any) -> None:
        del self.tok.encode


def bench_tracking(tok: ChatTokenizer, mode: str, style: str, repeats: int) -> dict[str, float]:
    turns = react_turns(tok, 20, tool_output_tokens=200, style=style)
    settings = TrackerSettings(mode=mode, tool_parser=style, max_model_len=100_000)
    run_episode(ContextTracker(tok, settings), turns)  # warm-up: template compile, caches
    tracked = calls = 0.0
    with _TimedEncode(tok) as timer:
        for _ in range(repeats):
            tracker = ContextTracker(tok, settings)
            ep = run_episode(tracker, turns)
            calls += len(ep.calls)
            tracked += sum(c.timings["prepare_s"] + c.timings["record_s"] for c in ep.calls)
    return {
        "calls_per_s": calls / tracked,
        "ms_per_call": 1e3 * tracked / calls,
        "ms_per_call_excl_tokenise": 1e3 * (tracked - timer.seconds) / calls,
        "prompt_tokens_last_call": len(ep.calls[-1].prompt_ids),
    }


def bench_merge(tok: ChatTokenizer, style: str, repeats: int) -> float:
    turns = react_turns(tok, 20, tool_output_tokens=200, style=style)
    tracker = ContextTracker(tok, TrackerSettings(tool_parser=style, max_model_len=100_000))
    calls = run_episode(tracker, turns).calls
    t0 = time.perf_counter()
    for _ in range(repeats):
        merge_calls(calls)
    return 1e6 * (time.perf_counter() - t0) / repeats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tokenizer", default="builtin:smollm2-135m-instruct")
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    tok = _tokenizer(args.tokenizer)
    style = "llama3_json" if tok.end_of_turn == "<|eot_id|>" else "hermes"
    print(f"tokenizer: {args.tokenizer} (tool calls: {style})")
    print("20-call ReAct conversation, 200-token tool outputs:")
    for mode in ("cumulative", "template"):
        r = bench_tracking(tok, mode, style, args.repeats)
        print(
            f"  {mode:<10} {r['calls_per_s']:8.0f} calls/s  {r['ms_per_call']:.3f} ms/call  "
            f"{r['ms_per_call_excl_tokenise']:.3f} ms/call without tokenising  "
            f"(last prompt {r['prompt_tokens_last_call']} tokens)"
        )
    print(f"  merge      {bench_merge(tok, style, args.repeats * 10):8.1f} us per conversation")
    tracker = ContextTracker(tok, TrackerSettings(tool_parser=style))
    ep = run_episode(tracker, react_turns(tok, 5, tool_output_tokens=200, style=style))
    _, report = merge_calls(ep.calls)
    print(
        f"5-call episode, 200-token tool outputs: {report.samples} sample(s), "
        f"{report.tokens_trained} tokens trained merged vs {report.tokens_unmerged} unmerged "
        f"({report.reduction:.2f}x fewer; {report.generated_tokens} generated)"
    )


if __name__ == "__main__":
    main()
