"""Reading YAML a user wrote (a config file, an `-o` value) without letting its shape blow up.

PyYAML shares the one object an alias (`*name`) points at, so a file of a few
hundred bytes whose aliases nest nine deep loads in milliseconds, yet is a
tree of hundreds of millions of values to everything that walks it later
(merging the layers, validation, `astuner config show`), which then fills
the memory. Nesting is bounded for the same reason: PyYAML composes, and
the config code merges, by recursion, and a few thousand levels overflow
Python's stack. Both are checked on PyYAML's node graph, before any Python
object is built.
"""

from __future__ import annotations

from typing import Any

import yaml

from astuner.errors import ConfigError

# Values the aliases of one document may add beyond those written out: far above
# any real config (verl's own block has a few hundred), far below a memory problem.
MAX_ALIAS_VALUES = 100_000
# Levels of nesting: a real config has under ten (verl.actor_rollout_ref.actor.fsdp_config...).
MAX_DEPTH = 100


class _TooDeep(Exception):
    def __init__(self, line: int) -> None:
        self.line = line


class _BoundedLoader(yaml.SafeLoader):
    """A SafeLoader that stops composing past `MAX_DEPTH` levels, before Python's stack does."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _TooDeep(self.peek_event().start_mark.line + 1)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def load_yaml(text: str, where: str) -> Any:
    """`text` read as YAML; `where` ("Config file 'x.yaml'") starts the error of a bomb or a cycle.

    Malformed YAML raises `yaml.YAMLError`, left to the caller, which knows
    how to point at it.
    """
    loader = _BoundedLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except _TooDeep as exc:
            raise ConfigError(_too_deep(where, exc.line)) from None
        if node is None:
            return None
        _check_shape(node, where)
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _too_deep(where: str, line: int) -> str:
    return (
        f"{where} nests values more than {MAX_DEPTH} levels deep (line {line}). A config needs a few "
        "levels: flatten the nesting."
    )


def _check_shape(root: yaml.Node, where: str) -> None:
    """Refuse a document whose aliases expand past `MAX_ALIAS_VALUES` values or `MAX_DEPTH` levels.

    Each node is walked once: a node met again (through an alias) adds its
    memoised expanded size and height, so the check costs what the text
    holds, not what it expands to.
    """
    seen: dict[int, tuple[int, int]] = {}  # id(node) -> (expanded size, height)
    on_path: set[int] = set()
    added = 0  # values that aliases add beyond the nodes written out

    def walk(node: yaml.Node, depth: int) -> tuple[int, int]:
        nonlocal added
        key = id(node)
        if key in on_path:
            raise ConfigError(
                f"{where}: the alias of the value anchored at line {node.start_mark.line + 1} sits "
                "inside that value, so it never ends. Point the alias at a value outside itself."
            )
        if key in seen:
            size, height = seen[key]
            added += size
            if depth + height > MAX_DEPTH:
                raise ConfigError(_too_deep(where, node.start_mark.line + 1))
            if added > MAX_ALIAS_VALUES:
                raise ConfigError(
                    f"{where}: its YAML aliases (*name) repeat values until the config holds more than "
                    f"{MAX_ALIAS_VALUES:,} values (the value anchored at line {node.start_mark.line + 1} "
                    "is one of them), which would fill the memory. A config never needs that many: "
                    "write the values out, or use fewer and less nested aliases."
                )
            return size, height
        if depth > MAX_DEPTH:
            raise ConfigError(_too_deep(where, node.start_mark.line + 1))
        if isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            children = []
        on_path.add(key)
        size, height = 1, 1
        for child in children:
            child_size, child_height = walk(child, depth + 1)
            size += child_size
            height = max(height, child_height + 1)
        on_path.discard(key)
        seen[key] = (size, height)
        return size, height

    walk(root, 1)
