"""Records bounded per call read back in the viewer: repeated messages restored, shortened text flagged.

Trajectories come from the real context tracker and are written by the
kernel's records writer; the viewer is a real server on 127.0.0.1. A record
written before the bound (one `model_dump_json()` line) shows the same.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
from logview_records import write_hint_run

from astuner.core.tokenizer import ChatTokenizer
from astuner.core.tracker import ContextTracker, TrackerSettings
from astuner.core.trajectory import Trajectory
from astuner.record import append_trajectories
from astuner.testing.conversations import SEARCH_TOOL, echo_assistant, react_turns
from astuner.testing.engines import LOGPROB
from astuner.testing.tokenizers import qwen25_tokenizer

LIMIT = 32_768  # astuner.record_lines.TEXT_LIMIT


def about(size: int) -> str:
    """A document of `size` characters whose head and tail can be told apart."""
    words = " ".join(f"w{n}" for n in range(size // 3))
    return words[:size]


def conversation(document: str) -> Trajectory:
    """Three ReAct calls through the real tracker, the user's message being `document`."""
    tokenizer = ChatTokenizer(qwen25_tokenizer())
    tracker = ContextTracker(tokenizer, TrackerSettings(max_model_len=1_000_000))
    messages = [
        {"role": "system", "content": "You are a helpful agent."},
        {"role": "user", "content": document},
    ]
    for turn in react_turns(tokenizer, 3):
        call = tracker.record(tracker.prepare(messages, [SEARCH_TOOL]), turn.ids, [LOGPROB] * len(turn.ids))
        messages.append(echo_assistant(call, "default"))
        for tool_call in call.tool_calls:
            messages.append({"role": "tool", "tool_call_id": tool_call.id, "content": turn.tool_output})
    return tracker.trajectory("doc-1", task_id="doc", group_id="g", reward=1.0, is_success=True)


def view(serve, root: Path, run: Path, file: str) -> dict:
    viewer = serve(root)
    url = viewer.url.rstrip("/") + "/api/trajectory"
    params = {"run": run.relative_to(root).as_posix(), "file": file, "line": 0}
    answer = httpx.get(url, params=params, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_shortened_text_is_marked_in_place_and_counted_in_the_view(
    serve, tmp_path: Path, calc_run: Path
) -> None:
    document = about(100_000)
    run = write_hint_run(tmp_path, calc_run)  # a run folder with a config naming the tokenizer
    (run / "rollouts" / "step_1.jsonl").unlink()
    append_trajectories(run / "rollouts" / "step_1.jsonl", [conversation(document)])

    shown = view(serve, tmp_path, run, "step_1.jsonl")
    cut = shown["clipped_characters"]
    first, second, third = shown["turns"]
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    kept = first["messages"][1]["content"]
    head, note, tail = kept.partition(f"\n[astuner: {cut:,} characters of this text are not kept")
    tail = tail.partition("]\n")[2]
    assert note and len(kept) <= LIMIT and len(head) + cut + len(tail) == len(document)
    assert document.startswith(head) and document.endswith(tail) and len(head) > LIMIT // 3
    # Later calls repeat the history: restored from the record, only what is new is shown.
    assert [m["role"] for m in second["messages"]] == ["tool"]
    assert [m["role"] for m in third["messages"]] == ["tool"]


def test_a_record_written_before_the_bound_shows_the_same_conversation(
    serve, tmp_path: Path, calc_run: Path
) -> None:
    trajectory = conversation(about(5_000))
    run = write_hint_run(tmp_path, calc_run)
    rollouts = run / "rollouts"
    (rollouts / "step_1.jsonl").write_text(trajectory.model_dump_json() + "\n", encoding="utf-8")
    shutil.copy(rollouts / "step_1.jsonl", tmp_path / "before.jsonl")
    append_trajectories(rollouts / "step_2.jsonl", [trajectory])
    assert (rollouts / "step_2.jsonl").stat().st_size < (tmp_path / "before.jsonl").stat().st_size

    before, after = (view(serve, tmp_path, run, f"step_{n}.jsonl") for n in (1, 2))
    assert before["turns"] == after["turns"] and before["samples"] == after["samples"]
    assert before["clipped_characters"] == after["clipped_characters"] == 0


def test_the_page_says_the_record_shortened_a_text(page, serve, tmp_path: Path, calc_run: Path) -> None:
    document = about(100_000)
    run = write_hint_run(tmp_path, calc_run)
    (run / "rollouts" / "step_1.jsonl").unlink()
    append_trajectories(run / "rollouts" / "step_1.jsonl", [conversation(document)])
    page.goto(serve(tmp_path).url)  # the only run opens by itself
    page.locator(".trajectory-row").first.click()
    note = page.wait_for_selector(".conversation .clipped-note")
    cut = int(note.inner_text().removeprefix("Shortened in the record: ").split(" ")[0].replace(",", ""))
    assert len(document) - LIMIT < cut < len(document) - LIMIT + 200
    marked = f"[astuner: {cut:,} characters of this text are not kept"
    assert marked in page.locator(".conversation").inner_text()


def overflowing() -> tuple[Trajectory, int]:
    """A reply, then two calls that overflow a 2,000-token context: one encoded (its prompt whole
    would be the returned count of ids), one whose new text alone is too long to encode."""
    tokenizer = ChatTokenizer(qwen25_tokenizer())
    settings = TrackerSettings(max_model_len=2000, max_response_length_in_one_turn=100)
    tracker = ContextTracker(tokenizer, settings)
    messages = [{"role": "user", "content": "Hello."}]
    reply = [*tokenizer.encode("Hi."), tokenizer.end_of_turn_id]
    first = tracker.record(tracker.prepare(messages), reply, [LOGPROB] * len(reply))
    messages.append(echo_assistant(first, "default"))
    long = [*messages, {"role": "user", "content": about(10_000)}]
    whole = len(ContextTracker(tokenizer, settings).prepare(long).prompt_ids)
    tracker.record(tracker.prepare(long))
    # 100,000 bytes: over 2,000 tokens of the longest this tokenizer has (16 bytes, '</tool_response>').
    tracker.record(tracker.prepare([*messages, {"role": "user", "content": about(100_000)}]))
    trajectory = tracker.trajectory("doc-2", task_id="doc", group_id="g", reward=1.0, is_success=True)
    return trajectory, whole


def test_an_overflowed_call_shows_how_much_of_its_prompt_the_record_kept(
    page, serve, tmp_path: Path, calc_run: Path
) -> None:
    trajectory, whole = overflowing()
    run = write_hint_run(tmp_path, calc_run)
    (run / "rollouts" / "step_1.jsonl").unlink()
    append_trajectories(run / "rollouts" / "step_1.jsonl", [trajectory])
    shown = view(serve, tmp_path, run, "step_1.jsonl")
    counts = [(t["response"]["prompt_tokens"], t["response"]["prompt_ids_omitted"]) for t in shown["turns"]]
    assert whole > 2000 and counts[1:] == [(2000, whole - 2000), (0, None)] and counts[0][1] == 0
    assert [s["calls"] for s in shown["samples"]] == [[0]]  # overflowed calls are never trained

    page.goto(serve(tmp_path).url)
    page.locator(".trajectory-row").first.click()
    page.wait_for_selector(".conversation .turn-head")
    heads = page.locator(".conversation .turn-head").all_inner_texts()
    assert f"2,000 of {whole:,} prompt tokens kept + 0 generated tokens · context_overflow" in heads[1]
    assert "prompt too long to encode (not kept) + 0 generated tokens · context_overflow" in heads[2]
    assert f"{counts[0][0]} prompt + {len(trajectory.calls[0].response_ids)} generated tokens" in heads[0]
