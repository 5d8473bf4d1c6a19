"""Reusable helpers for astuner's tests and benchmarks.

Nothing here is needed at run time; it builds small but real tokenizers and
scripted conversations so tests never need the model hub.
"""
