import importlib.metadata
from types import SimpleNamespace

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from astuner import hookimpl
from astuner.cli import make_app
from astuner.components import check_plugin_blocks
from astuner.config import load_config
from astuner.errors import ConfigError, PluginError
from astuner.import_strings import resolve_import_string
from astuner.plugins import NotReady, Plugins


class NullReaderSettings(BaseModel):
    size: int = 1


class NullReader:
    def __init__(self, settings: NullReaderSettings) -> None:
        self.settings = settings

    def read(self, split):  # pragma: no cover - never iterated here
        return iter(())


def _plugin(**hooks: object) -> SimpleNamespace:
    return SimpleNamespace(**{name: hookimpl(fn) for name, fn in hooks.items()})


def test_defaults_are_registered_with_the_kernel_version(plugins: Plugins) -> None:
    infos = {i.name: i for i in plugins.infos()}
    assert infos["arith_reader"].provides == ["reader:arith"]
    assert infos["exact_judge"].provides == ["judge:exact"]
    assert infos["jsonl_reader"].distribution == "astuner"
    assert infos["jsonl_reader"].version
    assert infos["jsonl_reader"].hooks == ["register_readers"]
    assert set(plugins.registry("reader")) == {"arith", "jsonl"}


def test_a_plugin_registers_a_factory_with_settings(plugins: Plugins) -> None:
    def register_readers(register):
        register("null", NullReader, settings=NullReaderSettings, summary="nothing")

    plugins.add(_plugin(register_readers=register_readers), name="nullplug")
    reg = plugins.get("reader", "null")
    assert reg.plugin == "nullplug"
    reader = reg.build(NullReaderSettings(size=3))
    assert reader.settings.size == 3
    assert reg.build().settings.size == 1


def test_a_name_registered_twice_names_both_plugins(plugins: Plugins) -> None:
    def register_judges(register):
        register("exact", lambda: None)

    plugins.add(_plugin(register_judges=register_judges), name="impostor")
    with pytest.raises(
        PluginError, match=r"'exact' is registered by two plugins: 'exact_judge' and 'impostor'"
    ):
        plugins.get("reader", "arith")
    impostor = {i.name: i for i in plugins.infos()}["impostor"]  # `plugins list` shows it, not "ok"
    assert impostor.status == "conflict" and "'exact' is registered by two plugins" in impostor.error


def test_a_plugin_that_exits_while_importing_is_marked_broken(tmp_path, monkeypatch) -> None:
    (tmp_path / "exiting_plugin.py").write_text("import sys\nsys.exit('no GPU found')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    entry = importlib.metadata.EntryPoint(name="exiting", value="exiting_plugin", group="astuner")
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: [entry])
    plugins = Plugins()
    info = {i.name: i for i in plugins.infos()}["exiting"]
    assert info.status == "import error" and info.error == "SystemExit: no GPU found"
    result = CliRunner().invoke(make_app(plugins), ["--help"])
    assert result.exit_code == 0 and "plugins" in result.output


def test_a_hook_that_raises_marks_only_that_plugin_broken(plugins: Plugins) -> None:
    def register_readers(register):
        raise RuntimeError("boom")

    plugins.add(_plugin(register_readers=register_readers), name="explodes")
    infos = {i.name: i for i in plugins.infos()}
    assert infos["explodes"].status == "hook error"
    assert "RuntimeError: boom" in infos["explodes"].error
    assert plugins.get("reader", "arith").name == "arith"


def test_a_plugin_reports_a_missing_engine_and_stays_usable(plugins: Plugins) -> None:
    def register_backbones(register):
        register("far", lambda: "built")

    plugin = _plugin(register_backbones=register_backbones)
    plugin.astuner_readiness = lambda: NotReady("engine not installed", "pip install 'far[engine]'")
    plugins.add(plugin, name="farplug")
    info = {i.name: i for i in plugins.infos()}["farplug"]
    assert (info.status, info.error) == ("engine not installed", "pip install 'far[engine]'")
    assert info.provides == ["backbone:far"]
    assert plugins.get("backbone", "far").build() == "built"
    ready = _plugin(register_backbones=lambda register: register("near", lambda: None))
    ready.astuner_readiness = lambda: None
    plugins.add(ready, name="nearplug")
    assert {i.name: i for i in plugins.infos()}["nearplug"].status == "ok"


def test_a_readiness_check_that_raises_is_reported(plugins: Plugins) -> None:
    plugin = _plugin(register_judges=lambda register: register("odd", lambda: None))
    plugin.astuner_readiness = lambda: 1 / 0
    plugins.add(plugin, name="oddplug")
    info = {i.name: i for i in plugins.infos()}["oddplug"]
    assert info.status == "readiness check failed" and "ZeroDivisionError" in info.error
    assert info.provides == ["judge:odd"]


def test_a_misspelled_hook_is_reported_with_the_right_name(plugins: Plugins) -> None:
    plugins.add(_plugin(register_reader=lambda register: None), name="typo")
    info = {i.name: i for i in plugins.infos()}["typo"]
    assert info.status == "invalid hook"
    assert "register_reader" in info.error and "register_readers" in info.error
    assert plugins.get("judge", "exact").name == "exact"


def test_unknown_name_lists_installed_and_suggests(plugins: Plugins) -> None:
    with pytest.raises(PluginError) as err:
        plugins.get("reader", "jsnl")
    message = str(err.value)
    assert "No reader named 'jsnl'" in message
    assert "Did you mean 'jsonl'?" in message
    assert "Installed: arith, jsonl." in message


@pytest.mark.parametrize(("engine", "setting"), [("vllm", "port=8000"), ("openai", "base_url=http://x/v1")])
def test_an_engine_the_kernel_no_longer_ships_names_its_package(
    plugins: Plugins, engine: str, setting: str
) -> None:
    """`rollout.engine: vllm` or an `engines.vllm` block without astuner-engine-vllm (or openai): the fix."""
    with pytest.raises(PluginError) as err:
        plugins.get("engine", engine)
    assert str(err.value) == (
        f"No engine named '{engine}' is installed (installed: (none)). Engine '{engine}' comes with the "
        f"plugin astuner-engine-{engine}: install it with `pip install astuner-engine-{engine}` (in a "
        f"checkout of astuner: `pip install -e ./plugins/engine-{engine}`)."
    )
    config = load_config(None, [f"rollout.engines.{engine}.{setting}"], environ={})
    with pytest.raises(
        ConfigError,
        match=rf"'rollout\.engines\.{engine}' in .* is the settings block of the engine '{engine}', which "
        rf"is not installed\. .*`pip install astuner-engine-{engine}`",
    ):
        check_plugin_blocks(config, plugins)


@pytest.mark.parametrize(
    "spec",
    ["astuner.default_plugins.arith_reader->ArithReader", "astuner.default_plugins.arith_reader:ArithReader"],
)
def test_import_strings_in_both_spellings(plugins: Plugins, spec: str) -> None:
    from astuner.default_plugins.arith_reader import ArithReader

    assert plugins.get("reader", spec).factory is ArithReader


def test_import_string_errors_say_what_is_wrong() -> None:
    with pytest.raises(PluginError, match=r"Cannot import module 'no_such_pkg\.mod'"):
        resolve_import_string("no_such_pkg.mod->Thing")
    with pytest.raises(PluginError, match=r"has no attribute 'ArithReadr'.*Did you mean 'ArithReader'"):
        resolve_import_string("astuner.default_plugins.arith_reader->ArithReadr")
    with pytest.raises(PluginError, match="not a valid import string"):
        resolve_import_string("->Thing")


def test_import_string_found_in_a_search_path(tmp_path) -> None:
    (tmp_path / "my_workflow_mod.py").write_text("class Flow:\n    pass\n")
    assert resolve_import_string("my_workflow_mod->Flow", [tmp_path]).__name__ == "Flow"


def test_each_install_hint_names_the_package_that_provides_the_name() -> None:
    """MOVED_OUT says which package of this repository provides what; where installed, it does."""
    from astuner.plugins import MOVED_OUT, command_names

    installed = Plugins()
    owner = {info.name: info.distribution for info in installed.infos()}
    app = make_app(installed)
    checked = 0
    for (kind, name), dist in MOVED_OUT.items():
        try:
            importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        if kind == "command":
            assert name in command_names(app), (kind, name)
        else:
            assert owner[installed.registry(kind)[name].plugin] == dist, (kind, name)
        checked += 1
    assert checked, "no plugin of this repository is installed"
