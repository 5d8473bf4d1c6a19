"""A rollout record is bounded per call: token ids and log-probs whole, repeated and huge texts not.

Real requests through the OpenAI gateway (HTTP on 127.0.0.1), a real
tokenizer, the records writer and reader.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from astuner import Task, WorkflowOutput
from astuner.core.tracker import ContextTracker, TrackerSettings
from astuner.record import append_trajectories, read_trajectories
from astuner.rollout.engine import SamplingParams
from astuner.rollout.gateway import Gateway
from astuner.rollout.runner import RunnerSettings

TASK = Task(task_id="doc", main_query="Summarise.", metadata={"answer": "ok"})
SENTENCE = "The quick brown fox jumps over the lazy dog, {n} times. "


def document(size: int) -> str:
    # Joined once: adding megabytes a sentence at a time copies the text over and over (48 s for 4 MB).
    sentences = (SENTENCE.format(n=n) for n in range(size // len(SENTENCE.format(n=0)) + 1))
    return "".join(sentences)[:size]


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a word up in the big dictionary of everything, then say what it means.",
            "parameters": {"type": "object", "properties": {"word": {"type": "string"}}},
        },
    }
]


def asks(text: str, turns: int):
    """A plain OpenAI-SDK agent: `text` as the user's message, then `turns - 1` follow-ups."""

    async def workflow(task: dict, model) -> WorkflowOutput:
        client = model.openai_client()
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]
        for _ in range(turns):
            reply = await client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
            messages += [{"role": "assistant", "content": reply.choices[0].message.content}]
            messages += [{"role": "user", "content": "And then?"}]
        return WorkflowOutput(response="ok")

    return workflow


def rollout(make_runner, text: str, turns: int, max_model_len: int = 18000):
    async def main():
        async with Gateway() as gateway:
            settings = RunnerSettings(tracker=TrackerSettings(max_model_len=max_model_len))
            runner, _ = make_runner(
                asks(text, turns), lambda prompt: "ok", settings=settings, gateway=gateway
            )
            return await runner.run([TASK], SamplingParams(max_tokens=16), progress=False)

    (trajectory,) = asyncio.run(main())
    assert trajectory.error is None, trajectory.error
    return trajectory


def clipped(kept: str) -> tuple[str, str, int]:
    """The head and tail a clipped text kept, and how many characters its note says were cut."""
    note = re.search(
        r"\n\[astuner: ([\d,]+) characters of this text are not kept in the record[^\]]*\]\n", kept
    )
    assert note, kept[:200]
    return kept[: note.start()], kept[note.end() :], int(note.group(1).replace(",", ""))


def written(trajectory, tmp_path: Path) -> tuple[str, Path]:
    path = tmp_path / "step_1.jsonl"
    append_trajectories(path, [trajectory])
    (line,) = path.read_text(encoding="utf-8").splitlines()
    return line, path


def test_a_4_mb_request_is_a_context_overflow_told_unencoded_and_its_record_line_stays_small(
    make_runner, tmp_path: Path
) -> None:
    text = document(4_000_000)  # the request: it made a 13 MB line and took 12 s to encode
    trajectory = rollout(make_runner, text, turns=1)
    (call,) = trajectory.calls
    assert call.finish_reason == "context_overflow" and not call.trainable
    assert call.prompt_ids == [] and call.prompt_source == "none"  # never encoded: it cannot fit
    assert call.prompt_ids_omitted is None  # how many ids it would have made is not known
    line, path = written(trajectory, tmp_path)
    assert len(line) < 100_000, f"{len(line):,} bytes"

    (back,) = read_trajectories(path)
    kept = back.calls[0].messages[1]["content"]
    head, tail, cut = clipped(kept)
    assert len(kept) <= 32_768 and len(head) > 16_000 and len(tail) > 16_000
    assert text.startswith(head) and text.endswith(tail) and len(head) + cut + len(tail) == len(text)
    assert "the call overflowed the context and kept only part of its prompt_ids, if any]" in kept
    # Written again (as `astuner sft` writes the records it trains on), the line stays as it is.
    assert written(back, tmp_path / "again")[0] == line


def test_an_overflowed_call_keeps_at_most_max_model_len_prompt_ids_and_counts_the_rest(
    make_runner, qwen25, tmp_path: Path
) -> None:
    text = document(100_000)  # encoded (it might fit by its size) to some 76,000 ids
    trajectory = rollout(make_runner, text, turns=1)
    (call,) = trajectory.calls
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]
    whole = ContextTracker(qwen25, TrackerSettings()).prepare(messages, TOOLS).prompt_ids
    assert call.finish_reason == "context_overflow" and len(whole) > 4 * 18000
    assert call.prompt_ids == whole[:18000] and call.prompt_ids_omitted == len(whole) - 18000
    line, path = written(trajectory, tmp_path)
    assert len(line) < 200_000, f"{len(line):,} bytes"
    (back,) = read_trajectories(path)
    assert (back.calls[0].prompt_ids, back.calls[0].prompt_ids_omitted) == (whole[:18000], len(whole) - 18000)
    # A line written before the count was kept reads as a call whose prompt is whole, as it then was.
    older = line.replace(f'"prompt_ids_omitted":{call.prompt_ids_omitted},', "")
    path.write_text(older + "\n", encoding="utf-8")
    assert read_trajectories(path)[0].calls[0].prompt_ids_omitted == 0


def test_messages_a_call_repeats_are_kept_once_and_read_back_whole(make_runner, tmp_path: Path) -> None:
    text = document(20_000)
    trajectory = rollout(make_runner, text, turns=4, max_model_len=65536)
    assert [len(c.messages) for c in trajectory.calls] == [2, 4, 6, 8]
    line, path = written(trajectory, tmp_path)
    assert line.count(text) == 1 and line.count("the big dictionary of everything") == 1
    assert read_trajectories(path) == [trajectory]


def test_a_line_whose_stand_in_names_no_earlier_call_is_refused(make_runner, tmp_path: Path) -> None:
    line, path = written(rollout(make_runner, document(2_000), turns=2, max_model_len=65536), tmp_path)
    stand_in = '{"astuner.repeats":{"call":0,"messages":2}}'
    assert line.count(stand_in) == 1
    path.write_text(line.replace(stand_in, stand_in.replace('"call":0', '"call":1')) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="call 1 repeats what call 1 holds, which comes no earlier"):
        read_trajectories(path)
