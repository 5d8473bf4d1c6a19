"""The built-in step metrics, declared through `register_metrics` like any plugin's.

The declarations themselves (labels, units, groups, console, health rules)
are `astuner.core.metric_declarations`, where the core's health checks read
them too.
"""

from __future__ import annotations

from astuner.core.metric_declarations import declare_builtin_metrics
from astuner.hookspecs import RegisterMetric, hookimpl


@hookimpl
def register_metrics(register: RegisterMetric) -> None:
    """Declare the kernel's and the torch backbone's metrics."""
    declare_builtin_metrics(register)
