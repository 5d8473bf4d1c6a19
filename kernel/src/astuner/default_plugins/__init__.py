"""Plugins that ship inside the kernel and need nothing beyond its dependencies.

The plugin manager imports and registers each module named here, always,
before any installed plugin; they show in `astuner plugins list` under the
distribution `astuner`.
"""

DEFAULT_PLUGINS: list[str] = [
    "astuner.default_plugins.jsonl_reader",
    "astuner.default_plugins.arith_reader",
    "astuner.default_plugins.exact_judge",
    "astuner.default_plugins.madness_checks",
    "astuner.default_plugins.debug_backbone",
    "astuner.default_plugins.init_command",
    "astuner.default_plugins.algorithms",
    "astuner.default_plugins.metrics",
]
