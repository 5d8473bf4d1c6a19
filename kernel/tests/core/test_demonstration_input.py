"""Demonstration input that cannot be trained as written is refused by name; what can is never changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from astuner.core.demonstrations import (
    DemonstrationError,
    demonstration_trajectory,
    read_demonstrations,
)
from astuner.core.tokenizer import ChatTokenizer
from astuner.core.tracker import TrackerSettings
from astuner.errors import AstunerError

SPELLED = "End a turn with <|im_end|>, then open one with <|im_start|>user."


def chat(reply: str = "4.") -> list[dict]:
    return [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": reply}]


@pytest.mark.parametrize("mode", ["cumulative", "template"])
def test_a_reply_that_spells_special_tokens_is_trained_as_that_text(qwen25: ChatTokenizer, mode: str) -> None:
    messages = [
        *chat(SPELLED),
        {"role": "user", "content": "Again?"},
        {"role": "assistant", "content": SPELLED},
    ]
    trajectory = demonstration_trajectory(qwen25, TrackerSettings(mode=mode), messages)
    for call in trajectory.calls:
        # the tokens a model writing the text generates, then the one control token that ends the turn
        assert call.response_ids == [*qwen25.encode_literal(SPELLED), qwen25.end_of_turn_id]
        assert qwen25.decode(call.response_ids) == SPELLED + qwen25.end_of_turn
    assert (
        trajectory.calls[1].prompt_ids[: len(trajectory.calls[0].prompt_ids)]
        == trajectory.calls[0].prompt_ids
    )


@pytest.mark.parametrize(
    ("message", "found"),
    [
        ({"role": "narrator", "content": "Meanwhile..."}, "message 1 has role 'narrator'"),
        ({"content": "no role"}, "message 1 has no role"),
        ("just text", "message 1 is str, not an object"),
    ],
)
def test_a_message_without_a_chat_role_is_refused_by_its_index(qwen25: ChatTokenizer, message, found) -> None:
    messages = [chat()[0], message, chat()[1]]
    with pytest.raises(DemonstrationError, match=f"{found}. .* one of system, user, assistant, tool"):
        demonstration_trajectory(qwen25, TrackerSettings(), messages)


def test_a_line_that_is_not_utf8_names_file_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "demos.jsonl"
    good = json.dumps({"messages": chat()}).encode()
    path.write_bytes(good + b"\n" + good.replace(b"What", b"Wh\xe9t") + b"\n")  # Latin-1's é
    column = good.index(b"What") + 3
    with pytest.raises(
        AstunerError, match=rf"demos.jsonl, line 2: not UTF-8 text \(byte 0xe9 at column {column}\)"
    ):
        list(read_demonstrations(path))


def test_a_line_longer_than_the_bound_is_refused_before_it_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "demos.jsonl"
    line = json.dumps({"messages": chat()})
    long = json.dumps({"messages": chat(), "note": "x" * 5000})
    path.write_text(f"{line}\n\n{long}\n{line}\n", encoding="utf-8")
    numbers = []
    with pytest.raises(
        AstunerError, match=r"demos.jsonl, line 3: longer than 1,000 bytes, the most one line"
    ):
        for demonstration in read_demonstrations(path, max_line_bytes=1000):
            numbers.append(demonstration.line)
    assert numbers == [1]
    exact = tmp_path / "exact.jsonl"
    exact.write_text(f"{line}\n{line}", encoding="utf-8")
    read = list(read_demonstrations(exact, max_line_bytes=len(line)))  # lines of exactly the bound are read
    assert [(d.line, d.read_bytes) for d in read] == [(1, len(line) + 1), (2, 2 * len(line) + 1)]


def test_tools_that_are_not_a_list_of_objects_name_the_line(tmp_path: Path) -> None:
    path = tmp_path / "demos.jsonl"
    path.write_text(json.dumps({"messages": chat(), "tools": "multiply"}) + "\n", encoding="utf-8")
    with pytest.raises(DemonstrationError, match=r"demos.jsonl, line 1: 'tools' is a list of tool objects"):
        list(read_demonstrations(path))
