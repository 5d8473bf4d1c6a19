"""Benchmark of the rollout log viewer on a large rollout file.

    python bench/bench_logview.py [--size-mb 500] [--calls 8] [--keep DIR] [--browser]

Writes a synthetic run whose `rollouts/step_1.jsonl` holds about SIZE MB of
ReAct-like trajectories as the runner writes them (CALLS calls with
cumulative prompts, token ids, float log-probs, messages; 8 calls make
about 160 kB a line, 2 calls about 16 kB), then prints side by side,
each measured in a fresh subprocess so peak memory is its own:

- opening the file: the viewer's index (one sequential read; summaries
  without parsing `calls`) against the two obvious peers: `json.loads` of
  every line (streaming, nothing kept) and `read_trajectories` (pydantic,
  all in memory; run on a slice and scaled, since the full file does not
  fit in memory here);
- peak resident memory above the interpreter's own, for each;
- once indexed: the first page of 50, a filtered page, and one trajectory
  view (read, merge, advantage, per-token decode).

With `--browser` it also times headless Chromium rendering a 30-call
trajectory of about 20k tokens (click to every token on the page, then a
hover on the last one). The file lives in the page cache after writing, so
figures are warm-cache ones.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from astuner.core.trajectory import LLMCall, Trajectory
from astuner.record import append_trajectories

FIRST_PROMPT, RESPONSE, TOOL = 400, 250, 100
TEMPLATES = 40


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def synthetic(rng: np.random.Generator, number: int, n_calls: int) -> Trajectory:
    """A ReAct-like trajectory: each call's prompt is the last prompt + response + a tool result."""
    prompt = rng.integers(0, 50_000, FIRST_PROMPT).tolist()
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"Task {number}: " + "solve this " * 40}]
    calls = []
    for k in range(n_calls):
        response = rng.integers(0, 50_000, RESPONSE).tolist()
        logprobs = (-rng.exponential(0.7, RESPONSE)).tolist()
        text = f"Step {k}: thinking about it " * 20
        calls.append(
            LLMCall(
                index=k,
                messages=list(messages),
                prompt_ids=prompt,
                response_ids=response,
                response_logprobs=logprobs,
                text=text,
                content=text,
                prompt_source="cumulative" if k else "template",
            )
        )
        messages += [{"role": "assistant", "content": text}, {"role": "tool", "content": "result " * 30}]
        prompt = prompt + response + rng.integers(0, 50_000, TOOL).tolist()
    return Trajectory(trajectory_id=f"t{number}", calls=calls)


def write_run(folder: Path, size_mb: int, n_calls: int) -> Path:
    """A run folder with `config.yaml` and `rollouts/step_1.jsonl` of about `size_mb` MB."""
    rollouts = folder / "rollouts"
    rollouts.mkdir(parents=True, exist_ok=True)
    config = {"astuner": {"backbone": "torch", "model": {"path": "no-tokenizer"}}}
    (folder / "config.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    path = rollouts / "step_1.jsonl"
    rng = np.random.default_rng(0)
    templates = [synthetic(rng, i, n_calls) for i in range(TEMPLATES)]
    written = n = 0
    with path.open("w", encoding="utf-8") as out:
        while written < size_mb * 1_000_000:
            group, repeat = divmod(n, 4)
            t = templates[n % TEMPLATES].model_copy(
                update={
                    "trajectory_id": f"g{group}-{repeat}",
                    "task_id": f"task-{group % 997}",
                    "group_id": f"g{group}",
                    "reward": float(rng.integers(0, 2)),
                    "is_success": bool(n % 3),
                    "madness": ["nonsense: loop"] if n % 50 == 0 else [],
                }
            )
            line = t.model_dump_json() + "\n"
            out.write(line)
            written += len(line)
            n += 1
    return path


# ------------------------------------------------------------ measurements


def measure_index(path: Path) -> dict[str, float]:
    from astuner_logview.store import Filters, RecordStore

    base = rss_mb()
    store = RecordStore(path.parent.parent)
    t0 = time.perf_counter()
    summaries = store.index(path).refresh()
    opened = time.perf_counter() - t0
    index_peak = peak_mb() - base
    t0 = time.perf_counter()
    store.page(".", Filters(), 0, 50)
    first_page = time.perf_counter() - t0
    t0 = time.perf_counter()
    filtered = store.page(".", Filters(task="task-1", success=True, min_reward=0.5), 0, 50)
    filtered_page = time.perf_counter() - t0
    t0 = time.perf_counter()
    view = store.trajectory(".", path.name, len(summaries) // 2)
    one_view = time.perf_counter() - t0
    return {
        "seconds": opened,
        "trajectories": len(summaries),
        "peak_mb": index_peak,
        "first_page_s": first_page,
        "filtered_page_s": filtered_page,
        "filtered_total": filtered["total"],
        "view_s": one_view,
        "view_tokens": sum(len(s["ids"]) for s in view["samples"]),
    }


def measure_json(path: Path) -> dict[str, float]:
    base = rss_mb()
    t0 = time.perf_counter()
    n = 0
    with path.open("rb") as lines:
        for line in lines:
            json.loads(line)
            n += 1
    return {"seconds": time.perf_counter() - t0, "trajectories": n, "peak_mb": peak_mb() - base}


def measure_pydantic(path: Path) -> dict[str, float]:
    from astuner.record import read_trajectories

    base = rss_mb()
    t0 = time.perf_counter()
    n = len(read_trajectories(path))
    return {"seconds": time.perf_counter() - t0, "trajectories": n, "peak_mb": peak_mb() - base}


MEASURES = {"index": measure_index, "json": measure_json, "pydantic": measure_pydantic}


def in_subprocess(kind: str, path: Path) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--measure", kind, str(path)], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def slice_of(path: Path, size_mb: int, target: Path) -> Path:
    """The first whole lines of `path` up to about `size_mb` MB."""
    written = 0
    with path.open("rb") as src, target.open("wb") as out:
        for line in src:
            if written >= size_mb * 1_000_000:
                break
            out.write(line)
            written += len(line)
    return target


# ------------------------------------------------------------------ browser


def long_run(folder: Path) -> Path:
    """A run with one 30-call trajectory of about 20k tokens, decodable with a saved tokenizer."""
    from astuner.core.tokenizer import ChatTokenizer
    from astuner.testing.tokenizers import qwen25_tokenizer

    hf = qwen25_tokenizer()
    hf.save_pretrained(folder / "tokenizer")
    tok = ChatTokenizer(hf)
    (folder / "run" / "rollouts").mkdir(parents=True)
    (folder / "run" / "config.yaml").write_text(
        yaml.safe_dump({"astuner": {"model": {"path": str(folder / "tokenizer")}}}), encoding="utf-8"
    )
    reply = tok.encode("The policy improves on its own samples; the loss raises good tokens. " * 40)[:640]
    prompt = tok.encode("<|im_start|>user\nTell me more.<|im_end|>\n<|im_start|>assistant\n")
    calls = []
    for k in range(30):
        logprobs = [-0.1 * (k % 9)] * len(reply)
        calls.append(LLMCall(index=k, prompt_ids=prompt, response_ids=reply, response_logprobs=logprobs))
        turn = f"\n<|im_start|>user\nTurn {k}.<|im_end|>\n<|im_start|>assistant\n"
        prompt = prompt + reply + tok.encode(turn)
    append_trajectories(
        folder / "run" / "rollouts" / "step_1.jsonl",
        [Trajectory(trajectory_id="long", calls=calls, reward=1.0)],
    )
    return folder / "run"


def bench_browser(folder: Path) -> dict[str, float]:
    from astuner_logview.server import start_logview
    from playwright.sync_api import sync_playwright

    run = long_run(folder)
    viewer = start_logview(run, port=0)
    args = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=shutil.which("chromium"), args=args)
            page = browser.new_page(viewport={"width": 1500, "height": 950})
            page.goto(viewer.url)
            page.wait_for_selector(".trajectory-row")
            timings = []
            for _ in range(2):  # the first view also waits for the tokenizer to load
                page.evaluate("document.getElementById('detail').replaceChildren()")
                t0 = time.perf_counter()
                page.locator(".trajectory-row").first.click()
                page.locator(".tok").last.wait_for(state="attached")
                timings.append(time.perf_counter() - t0)
            tokens = page.locator(".tok").count()
            t0 = time.perf_counter()
            last = page.locator(".tok").last
            last.scroll_into_view_if_needed()
            last.hover()
            page.locator("#tooltip").wait_for(state="visible")
            hover = time.perf_counter() - t0
            browser.close()
    finally:
        viewer.stop()
    return {"tokens": tokens, "first_s": timings[0], "render_s": timings[1], "scroll_hover_s": hover}


# -------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=500)
    parser.add_argument("--calls", type=int, default=8, help="model calls per trajectory")
    parser.add_argument("--slice-mb", type=int, default=25, help="size given to the pydantic peer")
    parser.add_argument("--keep", type=Path, help="folder to keep (and reuse) the synthetic run in")
    parser.add_argument("--browser", action="store_true", help="also time Chromium on a 20k-token trajectory")
    parser.add_argument("--measure", nargs=2, metavar=("KIND", "FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        kind, file = args.measure
        print(json.dumps(MEASURES[kind](Path(file))))
        return

    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-logview-"))
    try:
        path = work / "run" / "rollouts" / "step_1.jsonl"
        if not path.exists() or path.stat().st_size < args.size_mb * 1_000_000 * 0.99:
            t0 = time.perf_counter()
            write_run(work / "run", args.size_mb, args.calls)
            print(f"wrote {path} in {time.perf_counter() - t0:.1f} s")
        size = path.stat().st_size / 1e6
        part = slice_of(path, args.slice_mb, work / "slice.jsonl")
        scale = size / (part.stat().st_size / 1e6)
        ours = in_subprocess("index", path)
        peer_json = in_subprocess("json", path)
        peer_pyd = in_subprocess("pydantic", part)
        print(f"\nrollout file: {size:.0f} MB, {ours['trajectories']} trajectories of {args.calls} calls")
        print(f"{'open the file':<44}{'seconds':>10}{'MB/s':>9}{'peak RSS MB':>13}{'time ratio':>12}")
        rows = [
            ("logview index (ours)", ours["seconds"], ours["peak_mb"]),
            ("json.loads every line (streaming)", peer_json["seconds"], peer_json["peak_mb"]),
            (
                f"read_trajectories, scaled from {args.slice_mb} MB",
                peer_pyd["seconds"] * scale,
                peer_pyd["peak_mb"] * scale,
            ),
        ]
        for name, seconds, peak in rows:
            ratio = seconds / ours["seconds"]
            print(f"{name:<44}{seconds:>10.2f}{size / seconds:>9.0f}{peak:>13.0f}{ratio:>11.1f}x")
        print(
            f"\nonce indexed: first page of 50 {ours['first_page_s'] * 1000:.1f} ms; "
            f"filtered page ({ours['filtered_total']} matches) {ours['filtered_page_s'] * 1000:.1f} ms; "
            f"one trajectory view ({ours['view_tokens']} tokens, ids only) {ours['view_s'] * 1000:.0f} ms"
        )
        if args.browser:
            result = bench_browser(work / "browser")
            print(
                f"chromium, a 30-call trajectory of {result['tokens']} tokens: click to every token on the "
                f"page {result['render_s']:.2f} s ({result['first_s']:.2f} s the first time, which loads "
                f"the tokenizer); scroll to the last token and hover {result['scroll_hover_s'] * 1000:.0f} ms"
            )
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
