"""Fixtures for astuner-notify's tests."""

from __future__ import annotations

from types import SimpleNamespace

import astuner_notify.plugin
import pytest
import typer

from astuner import hookimpl
from astuner.cli import make_app
from astuner.plugins import Plugins
from astuner.testing.backbones import EndingBackbone, EndSettings


@pytest.fixture
def app(plugins: Plugins) -> typer.Typer:
    """The CLI with astuner-notify's notifiers and the test backbone `ending`."""

    def register_backbones(register):
        register("ending", EndingBackbone, settings=EndSettings)

    plugins.add(astuner_notify.plugin, name="notify")
    plugins.add(SimpleNamespace(register_backbones=hookimpl(register_backbones)), name="ending")
    return make_app(plugins)
