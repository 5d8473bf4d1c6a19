"""Errors a user can act on.

Every `AstunerError` carries one readable paragraph that names the
offending key, file, plugin or request and how to fix it. The CLI prints
that paragraph on stderr, without a traceback unless `--verbose`.
"""

from __future__ import annotations


class AstunerError(Exception):
    """A problem with the user's input or environment, explained in words."""


class ConfigError(AstunerError):
    """The configuration cannot be loaded or is invalid."""


class PluginError(AstunerError):
    """A plugin is missing, broken, or conflicts with another."""
