"""Errors a user can act on.

Every `AstunerError` carries one readable paragraph that names the
offending key, file, plugin or request and how to fix it. The CLI prints
that paragraph on stderr, without a traceback unless `--verbose`.
"""

from __future__ import annotations


class AstunerError(Exception):
    """A problem with the user's input or environment, explained in words.

    A plugin raises it (or `ConfigError`) for what the user can fix; the
    CLI prints the message alone, so it says what is wrong and what to do:

    ```python
    from astuner.api import AstunerError

    if not data_dir.is_dir():
        raise AstunerError(f"{data_dir} is not a folder: point task_reader.my_reader.path at your data.")
    ```
    """


class ConfigError(AstunerError):
    """The configuration cannot be loaded or is invalid.

    A plugin raises it for a setting its settings model cannot check alone:

    ```python
    from astuner.api import ConfigError

    if settings.url is None and settings.model is None:
        raise ConfigError("task_judge.my_judge: set `url` (a running server) or `model` (one to start).")
    ```
    """


class PluginError(AstunerError):
    """A plugin is missing, broken, or conflicts with another."""
