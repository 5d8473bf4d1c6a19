"""Plugins declare their own config knowledge: what a backbone reads, old names, notifier switches.

`astuner.compat` holds no table of built-in plugins: a third-party plugin
that registers the same declarations gets the same treatment.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel

from astuner import compat, hookimpl
from astuner.cli import make_app
from astuner.config import load_config
from astuner.declarations import declared
from astuner.logs import configure_logging
from astuner.plugins import Plugins
from astuner.testing.backbones import EndingBackbone, EndSettings, run_ending

# The keys a seed config sets that only some backbones read, and two every backbone reads.
SET_KEYS = {
    "data": {"train_batch_size": 8, "max_prompt_length": 512},
    "trainer_common": {"save_freq": 5, "keep_last_checkpoints": 2, "nnodes": 1},
    "rollout": {"temperature": 0.5, "tensor_model_parallel_size": 1, "multi_turn": {"expected_steps": 3}},
    "debug": {"debug_max_parallel": 2},
}
TORCH_READS = (
    "data.train_batch_size",
    "trainer_common",
    "trainer_common.keep_last_checkpoints",
    "trainer_common.algorithm.rollout_correction",
)


@pytest.fixture(autouse=True)
def _logging_to_a_lasting_stream() -> Iterator[None]:
    """Each test's captured stderr is closed after it: leave the log on the process's own stderr."""
    yield
    with contextlib.redirect_stderr(sys.__stderr__):
        configure_logging()


def listen(capsys: pytest.CaptureFixture[str]) -> Callable[[], str]:
    """Notices logged from now on to this test's captured stderr; call the result to read them."""
    configure_logging()
    capsys.readouterr()
    return lambda: capsys.readouterr().err


def with_plugin(plugins: Plugins, name: str, **hooks: Callable[..., Any]) -> Plugins:
    plugins.add(SimpleNamespace(**{hook: hookimpl(fn) for hook, fn in hooks.items()}), name=name)
    return plugins


def unused_notice(notices: str, backbone: str) -> list[str]:
    (listed,) = re.findall(rf"Not used on backbone '{backbone}': (.*?)\.\s", notices)
    return listed.split(", ")


# ------------------------------------------------------------------ backbones: reads


def test_a_third_party_backbone_reading_what_torch_reads_is_told_the_same_unused_keys(
    write_config, capsys
) -> None:
    def register_backbones(register):
        register("mine", object, reads=TORCH_READS)

    plugins = with_plugin(Plugins(), "third_party_backbone", register_backbones=register_backbones)
    notices = listen(capsys)
    path = write_config(SET_KEYS)
    load_config(path, environ={}, backbone="torch", plugins=plugins)
    torch = unused_notice(notices(), "torch")
    load_config(path, environ={}, backbone="mine", plugins=plugins)
    assert unused_notice(notices(), "mine") == torch
    assert torch == [
        "data.max_prompt_length",
        "debug: block",
        "rollout.multi_turn.expected_steps",
        "rollout.tensor_model_parallel_size",
        "trainer_common.nnodes",
    ]


def test_a_backbone_that_declares_nothing_is_never_told_of_unused_keys(write_config, capsys) -> None:
    def register_backbones(register):
        register("silent", object)

    plugins = with_plugin(Plugins(), "third_party_silent", register_backbones=register_backbones)
    notices = listen(capsys)
    load_config(write_config(SET_KEYS), environ={}, backbone="silent", plugins=plugins)
    assert "Not used on backbone" not in notices()


def test_the_readers_of_a_key_are_the_backbones_that_declare_its_longest_prefix(plugins: Plugins) -> None:
    def register_backbones(register):
        register("wide", object, reads=("trainer_common",))
        register("narrow", object, reads=("trainer_common", "trainer_common.nnodes"))

    known = declared(with_plugin(plugins, "two", register_backbones=register_backbones))
    keys = ["trainer_common.nnodes", "trainer_common.save_freq", "rollout.temperature", "debug.x"]
    assert compat.unused_on_backbone(keys, "wide", known) == ["debug: block", "trainer_common.nnodes"]
    assert compat.unused_on_backbone(keys, "narrow", known) == ["debug: block"]
    assert compat.unused_on_backbone(keys, "debug", known) == [
        "trainer_common.nnodes",
        "trainer_common.save_freq",
    ]


def test_a_backbones_engine_only_key_lives_where_it_declares(plugins: Plugins, write_config) -> None:
    def register_backbones(register):
        register("mine", object, reads=(), key_homes={"workers": "trainer_common.save_freq"})

    with_plugin(plugins, "third_party_homes", register_backbones=register_backbones)
    block = {"trainer_common": {"mine_only__workers": 9, "mine_only__test_freq": 3}}
    config = load_config(write_config(block), environ={}, backbone="mine", plugins=plugins)
    assert (config.trainer_common.save_freq, config.trainer_common.test_freq) == (9, 3)
    elsewhere = load_config(write_config(block, name="d.yaml"), environ={}, backbone="debug", plugins=plugins)
    assert elsewhere.trainer_common.save_freq == 20
    assert "mine_only__workers" not in elsewhere.to_yaml_dict()["astuner"]["trainer_common"]


# ------------------------------------------------------------------ old names


def test_a_third_party_judges_old_names_are_read_as_its_name(plugins: Plugins, write_config, capsys) -> None:
    def register_judges(register):
        register("graded", object, old_names=("grader", "old_grading->Grader"))

    with_plugin(plugins, "third_party_judge", register_judges=register_judges)
    notices = listen(capsys)
    for old in ("grader", "astune.task_judge.old_grading->Grader", "ajet.task_judge.old_grading: Grader"):
        block = {"task_judge": {"judge_protocol": old}}
        config = load_config(write_config(block), environ={}, plugins=plugins)
        assert config.task_judge.judge_protocol == "graded", old
        assert ", alias of " in config.origins.origin_of("task_judge.judge_protocol")
    assert notices().count("is the built-in 'graded' today") == 3
    own_block = {"task_judge": {"judge_protocol": "old_grading->Grader"}}
    own = load_config(write_config(own_block), environ={}, plugins=plugins)
    assert own.task_judge.judge_protocol == "old_grading->Grader"  # the user's own module, not an old package


# ------------------------------------------------------------------ notifiers: switched_on_by


class Pager:
    """A notifier that remembers the runs it was told of."""

    told: ClassVar[list[Any]] = []

    def __init__(self, settings: PagerSettings) -> None:
        self.settings = settings

    def notify(self, summary: Any) -> None:
        Pager.told.append(summary)


class PagerSettings(BaseModel):
    channel: str = "ops"


def test_a_third_party_notifier_is_switched_on_by_its_variable(
    plugins: Plugins, write_config, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def register_notifiers(register):
        register("pager", Pager, settings=PagerSettings, switched_on_by=("ASTUNER_TEST_PAGER",))

    def register_backbones(register):
        register("ending", EndingBackbone, settings=EndSettings)

    with_plugin(plugins, "third_party_pager", register_notifiers=register_notifiers)
    with_plugin(plugins, "ending", register_backbones=register_backbones)
    Pager.told = []
    monkeypatch.delenv("ASTUNER_TEST_PAGER", raising=False)
    assert compat.switched_on_notifiers({}, plugins) == {}
    monkeypatch.setenv("ASTUNER_TEST_PAGER", "1")
    assert compat.switched_on_notifiers({}, plugins) == {"pager": "ASTUNER_TEST_PAGER"}
    assert compat.switched_on_notifiers({"pager": {}}, plugins) == {}  # its block turns it on already

    result = run_ending(make_app(plugins), write_config(name="paged.yaml"))
    assert result.exit_code == 0, result.output
    (summary,) = Pager.told
    assert (summary.name, summary.status) == ("paged", "finished")


# ------------------------------------------------------------------ declarations a kind cannot use


@pytest.mark.parametrize(
    ("hook", "kwargs", "error"),
    [
        ("register_judges", {"reads": ("data",)}, "reads means nothing for judge 'x'"),
        ("register_judges", {"switched_on_by": ("X",)}, "switched_on_by means nothing for judge 'x'"),
        ("register_notifiers", {"old_names": ("y",)}, "old_names means nothing for notifier 'x'"),
        ("register_judges", {"key_homes": {"a": "b.c"}}, "key_homes means nothing for judge 'x'"),
        ("register_backbones", {"reads": "trainer_common"}, "must be a list of strings"),
        ("register_notifiers", {"switched_on_by": ("",)}, "must hold non-empty strings"),
    ],
)
def test_a_declaration_a_kind_cannot_use_marks_the_plugin_broken(
    plugins: Plugins, hook: str, kwargs: dict[str, Any], error: str
) -> None:
    def register(register):
        register("x", object, **kwargs)

    with_plugin(plugins, "misdeclared", **{hook: register})
    (info,) = [i for i in plugins.infos() if i.name == "misdeclared"]
    assert info.status == "hook error"
    assert error in (info.error or "")
