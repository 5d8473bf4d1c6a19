"""The plugin manager: discovery, registries and `astuner plugins list`.

Plugins come from three places: the kernel's own `default_plugins`, entry
points in the `astuner` group (installed packages), and objects a test
registers by hand. One broken plugin never takes the others down: an import
error, a misspelled hook or a hook that raises marks that plugin broken and
the rest keep working.

A plugin whose registrations work but whose run-time requirements may be
missing (an engine installed through an extra, say) defines a module-level
`astuner_readiness()` returning `None` when ready or a `NotReady(status,
hint)` (the `ReportsReadiness` protocol). Such a plugin stays loaded (its config translation still works);
`astuner plugins list` shows the status and the hint instead of "ok".
"""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy
from pydantic import BaseModel

from astuner import hookspecs
from astuner.declarations import Declarations
from astuner.default_plugins import DEFAULT_PLUGINS
from astuner.errors import PluginError
from astuner.import_strings import is_import_string, resolve_import_string
from astuner.protocols import ReportsReadiness
from astuner.version import kernel_version

if TYPE_CHECKING:
    from astuner.lifecycle import Runs

ENTRY_POINT_GROUP = "astuner"
LOAD_PLUGINS_ENV = "ASTUNER_LOAD_PLUGINS"
# (kind, name) -> the distribution of this repository that provides it: a config, flag or command
# that names one not installed (`--backbone torch` with the kernel alone, `rollout.engine: vllm`
# from the days the kernel had it) is told the package to install.
MOVED_OUT: dict[tuple[str, str], str] = {
    **{("backbone", name): f"astuner-backbone-{name}" for name in ("torch", "verl", "trinity")},
    ("engine", "transformers"): "astuner-backbone-torch",
    ("engine", "vllm"): "astuner-engine-vllm",
    ("engine", "openai"): "astuner-engine-openai",
    ("executor", "ray"): "astuner-executor-ray",
    ("judge", "math_answer"): "astuner-judge-math",
    ("judge", "math_answer_llm"): "astuner-judge-math",
    ("judge", "env_service"): "astuner-judge-envservice",
    ("reader", "env_service"): "astuner-judge-envservice",
    ("reader", "huggingface_dat_repo"): "astuner-reader-hf",
    **{("companion", name): "astuner-judge-envservice" for name in ("env", "appworld")},
    ("companion", "logview"): "astuner-logview",
    **{("notifier", name): "astuner-notify" for name in ("webhook", "command", "sms")},
    ("command", "sft"): "astuner-backbone-torch",
    ("command", "eval"): "astuner-eval",
    ("command", "logview"): "astuner-logview",
    ("command", "envservice"): "astuner-judge-envservice",
    ("command", "data download"): "astuner-reader-hf",
}

# kind -> the hook that registers it
KINDS: dict[str, str] = {
    "reader": "register_readers",
    "workflow": "register_workflows",
    "judge": "register_judges",
    "madness_check": "register_madness_checks",
    "backbone": "register_backbones",
    "engine": "register_engines",
    "executor": "register_executors",
    "notifier": "register_notifiers",
    "companion": "register_companions",
    "advantage_estimator": "register_advantage_estimators",
    "policy_loss": "register_policy_losses",
}


@dataclass(frozen=True)
class Registration:
    """One named thing a plugin provides, and what it declares about the config (see `Register`)."""

    kind: str
    name: str
    factory: Callable[..., Any]
    plugin: str
    settings: type[BaseModel] | None = None
    summary: str = ""
    declares: Declarations = field(default_factory=Declarations)

    def build(self, settings: BaseModel | None = None, *args: Any) -> Any:
        """Call the factory: with the validated settings block if it declares one.

        `args` follow the settings, e.g. the `EngineModel` an engine serves
        (`astuner.components`, which also adds the services a factory names).
        """
        if self.settings is None:
            return self.factory(*args)
        return self.factory(settings if settings is not None else self.settings(), *args)


def install_hint(kind: str, name: str) -> str:
    """How to install the plugin of this repository that provides `name`, or "" if none does."""
    dist = MOVED_OUT.get((kind, name))
    if dist is None:
        return ""
    return (
        f"{kind.capitalize()} '{name}' comes with the plugin {dist}: install it with `pip install {dist}` "
        f"(in a checkout of astuner: `pip install -e ./plugins/{dist.removeprefix('astuner-')}`)."
    )


def missing_block_message(kind: str, name: str, key: str, origin: str) -> str:
    """Why the settings block `key` of a plugin of this repository that is not installed is refused, or "".

    Such a block is no typo (`torch:` with the kernel alone): the message names the package that reads it.
    """
    moved = install_hint(kind, name)
    if not moved:
        return ""
    return (
        f"'{key}' in {origin} is the settings block of the {kind.replace('_', ' ')} '{name}', which is not "
        f"installed. {moved}"
    )


def command_names(app: Any) -> set[str]:
    """The names a typer app answers to: its commands and its sub-apps, and theirs (`data download`)."""
    named = {info.name or info.callback.__name__ for info in app.registered_commands if info.callback}
    for group in app.registered_groups:
        if group.name:
            named.add(group.name)
            if group.typer_instance is not None:
                named |= {f"{group.name} {sub}" for sub in command_names(group.typer_instance)}
    return named


@dataclass(frozen=True)
class NotReady:
    """What a plugin's `astuner_readiness()` returns when something it needs is missing.

    `status` is the short state shown in the list (e.g. "engine not
    installed"); `hint` says how to fix it (e.g. the pip install line).
    The check looks a library up without importing it, so that listing
    plugins stays fast:

    ```python
    import importlib.util

    from astuner.api import NotReady


    def astuner_readiness() -> NotReady | None:
        if importlib.util.find_spec("verl") is None:
            return NotReady("engine not installed", "pip install 'astuner-backbone-verl[engine]'")
        return None
    ```
    """

    status: str
    hint: str


@dataclass
class PluginInfo:
    """What `astuner plugins list` shows for one plugin."""

    name: str
    distribution: str | None = None
    version: str | None = None
    hooks: list[str] = field(default_factory=list)
    provides: list[str] = field(default_factory=list)
    status: str = "ok"
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "hooks": self.hooks,
            "provides": self.provides,
            "status": self.status,
            "error": self.error,
        }


# What a plugin may raise while it loads or registers without taking the CLI down:
# everything but the user's Ctrl-C (KeyboardInterrupt) and interpreter shutdown.
PLUGIN_FAULTS = (Exception, SystemExit)


class Plugins:
    """A pluggy plugin manager plus the registries built from its hooks.

    Tests build `Plugins(load_entry_points=False)` and `add()` what they
    need; the CLI builds one with everything installed.
    """

    def __init__(self, *, load_entry_points: bool = True, load_defaults: bool = True) -> None:
        self.pm = pluggy.PluginManager("astuner")
        self.pm.add_hookspecs(hookspecs)
        self._infos: dict[str, PluginInfo] = {}
        self._registries: dict[str, dict[str, Registration]] | None = None
        self._conflicts: list[str] = []
        if load_defaults:
            version = kernel_version()
            for module_name in DEFAULT_PLUGINS:
                module = importlib.import_module(module_name)
                short = module_name.rsplit(".", 1)[-1]
                self.add(module, name=short, distribution="astuner", version=version)
        if load_entry_points:
            self.load_entry_points()

    # -- loading --------------------------------------------------------

    def add(
        self,
        plugin: Any,
        *,
        name: str | None = None,
        distribution: str | None = None,
        version: str | None = None,
    ) -> None:
        """Register a plugin object; a plugin that fails validation is marked broken."""
        name = name or getattr(plugin, "__name__", None) or type(plugin).__name__
        info = PluginInfo(name=name, distribution=distribution, version=version)
        self._infos[name] = info
        self._registries = None
        try:
            self.pm.register(plugin, name=name)
            self.pm.check_pending()
        except pluggy.PluginValidationError as exc:
            if self.pm.get_plugin(name) is not None:
                self.pm.unregister(name=name)
            self._mark_broken(info, "invalid hook", _explain_validation(exc))
            return
        info.hooks = sorted(caller.name for caller in self.pm.get_hookcallers(plugin) or [])
        _apply_readiness(plugin, info)

    def remove(self, name: str) -> None:
        """Unregister a plugin added by `add()`, e.g. the functions of one `astuner.tune()` call."""
        if self.pm.get_plugin(name) is not None:
            self.pm.unregister(name=name)
        self._infos.pop(name, None)
        self._registries = None

    def load_entry_points(self) -> None:
        """Load every `astuner` entry point, narrowed by ASTUNER_LOAD_PLUGINS."""
        allowed = _allowed_plugins()
        for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            dist = ep.dist.name if ep.dist else None
            if allowed is not None and ep.name not in allowed and dist not in allowed:
                continue
            if ep.name in self._infos:
                continue
            version = ep.dist.version if ep.dist else None
            try:
                plugin = ep.load()
            except PLUGIN_FAULTS as exc:  # a broken plugin must not take the CLI down, even by sys.exit()
                info = PluginInfo(name=ep.name, distribution=dist, version=version)
                self._infos[ep.name] = info
                self._mark_broken(info, "import error", f"{type(exc).__name__}: {exc}")
                continue
            self.add(plugin, name=ep.name, distribution=dist, version=version)

    # -- registries -----------------------------------------------------

    def registry(self, kind: str) -> dict[str, Registration]:
        """All registrations of one kind, by name."""
        if kind not in KINDS:
            raise ValueError(f"unknown plugin kind {kind!r}; kinds: {', '.join(KINDS)}")
        if self._registries is None:
            self._collect()
        assert self._registries is not None
        return self._registries[kind]

    def get(self, kind: str, name: str, search_paths: Iterable[Path] = ()) -> Registration:
        """Find a registration by name, or resolve an import string."""
        self.check_conflicts()
        if is_import_string(name):
            obj = resolve_import_string(name, search_paths)
            return Registration(kind=kind, name=name, factory=obj, plugin=f"import:{name}")
        registry = self.registry(kind)
        if name in registry:
            return registry[name]
        installed = ", ".join(sorted(registry)) or "(none)"
        near = difflib.get_close_matches(name, list(registry), n=1)
        hint = f" Did you mean '{near[0]}'?" if near else ""
        broken = [i.name for i in self._infos.values() if self.pm.get_plugin(i.name) is None]
        broken_note = (
            f" Some plugins failed to load ({', '.join(broken)}); see `astuner plugins list`."
            if broken
            else ""
        )
        if moved := install_hint(kind, name):
            raise PluginError(
                f"No {kind} named '{name}' is installed (installed: {installed}).{broken_note} {moved}"
            )
        raise PluginError(
            f"No {kind.replace('_', ' ')} named '{name}'.{hint} Installed: {installed}."
            f"{broken_note} Install the plugin that provides it, or give an import "
            "string such as 'my_package.module->MyClass'."
        )

    def check_conflicts(self) -> None:
        """Raise if two plugins registered the same name for the same kind."""
        if self._registries is None:
            self._collect()
        if self._conflicts:
            raise PluginError(
                " ".join(self._conflicts) + " Uninstall one of them, or narrow the plugins loaded with "
                f"{LOAD_PLUGINS_ENV}=name1,name2."
            )

    def infos(self) -> list[PluginInfo]:
        """Every plugin seen, loaded or broken, with what it provides."""
        if self._registries is None:
            self._collect()
        return list(self._infos.values())

    def call_register_commands(self, cli: Any, runs: Runs) -> None:
        """Let plugins add CLI sub-commands; a failing plugin is marked broken.

        Each hook is given the arguments it names of `cli` and `runs` (these
        plugins, and how to open a run). The caller hands `runs` in: the
        lifecycle that makes it sits above the plugin manager.
        """
        given = {"cli": cli, "runs": runs}
        for impl in self.pm.hook.register_commands.get_hookimpls():
            try:
                impl.function(**{name: given[name] for name in impl.argnames})
            except PLUGIN_FAULTS as exc:
                info = self._infos[impl.plugin_name]
                self._mark_broken(info, "hook error", f"register_commands: {type(exc).__name__}: {exc}")

    def command_names(self, runs: Runs) -> set[str]:
        """The sub-commands the plugins add to the command line (registered on a scratch app with `runs`)."""
        import typer

        app = typer.Typer()
        self.call_register_commands(app, runs)
        return command_names(app)

    def _collect(self) -> None:
        registries: dict[str, dict[str, Registration]] = {kind: {} for kind in KINDS}
        self._conflicts = []
        for plugin_name, plugin in self.pm.list_name_plugin():
            info = self._infos[plugin_name]
            info.provides = []
            staged: list[Registration] = []
            try:
                for kind, hook_name in KINDS.items():
                    for impl in getattr(self.pm.hook, hook_name).get_hookimpls():
                        if impl.plugin is plugin:
                            impl.function(register=_register_into(staged, kind, plugin_name))
            except PLUGIN_FAULTS as exc:
                self._mark_broken(info, "hook error", f"{type(exc).__name__}: {exc}")
                continue
            for reg in staged:
                existing = registries[reg.kind].get(reg.name)
                if existing is not None:
                    conflict = (
                        f"The {reg.kind.replace('_', ' ')} name '{reg.name}' is registered "
                        f"by two plugins: '{existing.plugin}' and '{reg.plugin}'."
                    )
                    self._conflicts.append(conflict)
                    # `plugins list` shows it too: the later plugin's registration is not used.
                    info.status, info.error = "conflict", conflict
                    continue
                registries[reg.kind][reg.name] = reg
                info.provides.append(f"{reg.kind}:{reg.name}")
        self._registries = registries

    def _mark_broken(self, info: PluginInfo, status: str, error: str) -> None:
        info.status = status
        info.error = error
        info.provides = []
        if self.pm.get_plugin(info.name) is not None:
            self.pm.unregister(name=info.name)
        self._registries = None


def _apply_readiness(plugin: Any, info: PluginInfo) -> None:
    """Let a loaded plugin report missing run-time requirements (see the module docstring)."""
    if not isinstance(plugin, ReportsReadiness):
        return
    try:
        verdict = plugin.astuner_readiness()
    except PLUGIN_FAULTS as exc:  # a faulty check must not take the CLI down either
        verdict = NotReady("readiness check failed", f"{type(exc).__name__}: {exc}")
    if isinstance(verdict, NotReady):
        info.status, info.error = verdict.status, verdict.hint


def _register_into(staged: list[Registration], kind: str, plugin_name: str) -> hookspecs.Register:
    def register(
        name: str,
        factory: Callable[..., Any],
        *,
        settings: type[BaseModel] | None = None,
        summary: str = "",
        **declares: Any,
    ) -> None:
        if not isinstance(name, str) or not name or is_import_string(name):
            raise ValueError(f"invalid {kind} name {name!r}: use a plain name without ':' or '->'")
        if not callable(factory):
            raise TypeError(f"the factory for {kind} '{name}' is not callable")
        if settings is not None and not (isinstance(settings, type) and issubclass(settings, BaseModel)):
            raise TypeError(f"settings for {kind} '{name}' must be a pydantic model class")
        checked = Declarations.checked(kind, f"{kind} '{name}'", **declares)
        staged.append(Registration(kind, name, factory, plugin_name, settings, summary, checked))

    return register


def _allowed_plugins() -> set[str] | None:
    value = os.environ.get(LOAD_PLUGINS_ENV)
    if value is None:
        return None
    return {part.strip() for part in value.split(",") if part.strip()}


def _explain_validation(exc: pluggy.PluginValidationError) -> str:
    message = str(exc)
    hook_names = [*list(KINDS.values()), "register_metrics", "register_commands"]
    for word in message.replace("'", " ").split():
        if word.startswith("register") and word not in hook_names:
            near = difflib.get_close_matches(word, hook_names, n=1)
            if near:
                return f"unknown hook '{word}' (did you mean '{near[0]}'?)"
            return f"unknown hook '{word}'"
    return message
