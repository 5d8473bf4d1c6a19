"""A run that cannot start leaves nothing open; what a run builds beside it is given its folder.

`astuner run --with-logview` opens the run (folder, status, log file) before
the viewer starts on that folder; a viewer that fails there (a port taken)
must end the run as failed and close its log file, or every later run of the
same process (the next test, a notebook's next cell) logs into a folder that
may be gone. Notifiers and companions that name the `run_folder` service get
the run's folder.
"""

from __future__ import annotations

import logging
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest

from astuner import hookimpl
from astuner.cli import make_app
from astuner.errors import AstunerError
from astuner.logs import LOGGER_NAME
from astuner.plugins import Plugins
from astuner.run_status import read_status
from astuner.testing.backbones import EndingBackbone, EndSettings, only_run, run_ending


class Seen:
    """The folders the parts built for a run were given."""

    folders: ClassVar[dict[str, Path | None]] = {}


class FolderNotifier:
    def __init__(self, run_folder: Path | None) -> None:
        Seen.folders["notifier"] = run_folder

    def notify(self, summary: Any) -> None:
        """Told of the run's end; the folder it was built with is what the test looks at."""


def occupied_viewer(value: str | None, run_folder: Path) -> Any:
    raise AstunerError(f"Port {value} on 127.0.0.1 is taken: give --logview-port another.")


def file_handlers() -> list[logging.Handler]:
    return [h for h in logging.getLogger(LOGGER_NAME).handlers if isinstance(h, logging.FileHandler)]


@pytest.fixture
def plugins_with_parts(plugins: Plugins) -> Plugins:
    def register_backbones(register):
        register("ending", EndingBackbone, settings=EndSettings)

    def register_notifiers(register):
        register("folder", FolderNotifier)

    def register_companions(register):
        register("logview", occupied_viewer)
        register("scratch", lambda value, run_folder: _scratch(run_folder))

    hooks = {
        "register_backbones": register_backbones,
        "register_notifiers": register_notifiers,
        "register_companions": register_companions,
    }
    plugins.add(SimpleNamespace(**{name: hookimpl(f) for name, f in hooks.items()}), name="start-parts")
    Seen.folders = {}
    return plugins


def _scratch(run_folder: Path) -> Any:
    Seen.folders["companion"] = run_folder
    return nullcontext()


def test_a_viewer_that_cannot_start_fails_the_run_and_closes_its_log(
    plugins_with_parts: Plugins, write_config, workdir: Path
) -> None:
    assert not file_handlers()
    result = run_ending(
        make_app(plugins_with_parts),
        write_config({}, name="taken.yaml"),
        "--with-logview",
        "--logview-port",
        "1",
    )
    assert result.exit_code == 1
    assert "Port 1 on 127.0.0.1 is taken" in result.output
    folder = only_run(workdir, "taken")
    status = read_status(folder)
    assert status.state == "failed" and "is taken" in status.reason
    assert not file_handlers()
    assert not (folder / "checkpoints").exists()  # the backbone never ran


def test_notifiers_and_companions_get_the_run_folder(
    plugins_with_parts: Plugins, write_config, workdir: Path
) -> None:
    conf = write_config({"notify": {"folder": {}}}, name="told.yaml")
    result = run_ending(make_app(plugins_with_parts), conf, "--with-scratch")
    assert result.exit_code == 0, result.output
    folder = only_run(workdir, "told")
    assert {part: seen and seen.resolve() for part, seen in Seen.folders.items()} == {
        "notifier": folder.resolve(),
        "companion": folder.resolve(),
    }
