"""`astuner plugins list` says whether vLLM itself is there, not only this plugin."""

import importlib.util

import astuner_engine_vllm.engine as entry_point
import pytest

from astuner.plugins import Plugins


def _with_vllm(monkeypatch: pytest.MonkeyPatch, present: bool) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: object) -> object:
        if name == "vllm":
            return real("os") if present else None
        return real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def _listed(monkeypatch: pytest.MonkeyPatch, present: bool) -> tuple[str, str | None]:
    _with_vllm(monkeypatch, present)
    plugins = Plugins(load_entry_points=False)
    plugins.add(entry_point, name="engine_vllm", distribution="astuner-engine-vllm")
    (info,) = [info for info in plugins.infos() if info.name == "engine_vllm"]
    assert info.provides == ["engine:vllm"]  # still registered: an attached server needs no local vLLM
    return info.status, info.error


def test_without_vllm_the_list_says_so_and_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    status, hint = _listed(monkeypatch, present=False)
    assert status == "vllm not installed"
    assert hint is not None and "pip install vllm" in hint and "rollout.engine_url" in hint


def test_with_vllm_the_plugin_is_ok(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _listed(monkeypatch, present=True) == ("ok", None)
