"""The seeds' `from vsdb import bp`: astuner's tagged breakpoints (`astuner.breakpoints`)."""

from astuner.breakpoints import bp

__all__ = ["bp"]
