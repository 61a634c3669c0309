"""Safe YAML loading that remembers where every value came from.

PyYAML's composer gives nodes with line and column; we build plain data from them ourselves so
that duplicate keys, foreign tags (``!!python/object``) and alias bombs are reported as problems
rather than constructed, and every later check can point at ``FILE:LINE:COL``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

Path_ = tuple  # a path into the data: keys and list indexes

_STANDARD_TAGS = {
    "tag:yaml.org,2002:" + name
    for name in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp")
}
MAX_NODES = 100_000  # an alias bomb expands past this long before it exhausts memory


@dataclass
class Located:
    """Plain data plus the line and column (1-based) of each value and each mapping key."""

    data: Any
    file: Path
    values: dict[Path_, tuple[int, int]] = field(default_factory=dict)
    keys: dict[Path_, tuple[int, int]] = field(default_factory=dict)

    def where(self, path: Path_, key: bool = False) -> tuple[int, int]:
        """The position of `path`, or of its nearest located ancestor."""
        table = self.keys if key else self.values
        path = tuple(path)
        while path not in table and path:
            path = path[:-1]
        return table.get(path, self.values.get(path, (1, 1)))


def walk(node: Any, path: Path_ = ()) -> Iterator[tuple[Path_, Any]]:
    """Every value of loaded data with its path, the data itself first."""
    yield path, node
    if isinstance(node, dict):
        for key, value in node.items():
            yield from walk(value, (*path, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from walk(value, (*path, i))


class YamlProblem(Exception):
    def __init__(self, line: int, column: int, message: str, expected: str = ""):
        super().__init__(message)
        self.line, self.column, self.message, self.expected = line, column, message, expected


def _mark(node: yaml.Node) -> tuple[int, int]:
    return node.start_mark.line + 1, node.start_mark.column + 1


# libyaml's parser where PyYAML was built with it: the same nodes and marks, several times faster
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_located(path: Path) -> tuple[Located, list[YamlProblem]]:
    """Parse `path`; return the data (None if unreadable) and every problem found."""
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        return Located(None, path), [YamlProblem(line, 1, "file is not UTF-8", "UTF-8 text")]
    if not text.strip():
        return Located(None, path), [YamlProblem(1, 1, "file is empty", "a YAML mapping")]
    try:
        try:
            node = yaml.compose(text, Loader=_LOADER)
        except yaml.YAMLError:  # PyYAML's own parser says what is wrong more plainly
            node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        return Located(None, path), [YamlProblem(line, col, f"invalid YAML: {exc.problem}")]
    except yaml.YAMLError as exc:  # e.g. several documents in one stream
        return Located(None, path), [YamlProblem(1, 1, f"invalid YAML: {exc}")]
    located = Located(None, path)
    problems: list[YamlProblem] = []
    builder = _Builder(located, problems)
    try:
        located.data = builder.build(node, ())
    except _TooBig as exc:
        problems.append(exc.problem)
        located.data = None
    return located, problems


class _TooBig(Exception):
    def __init__(self, problem: YamlProblem):
        self.problem = problem


class _Builder:
    def __init__(self, located: Located, problems: list[YamlProblem]):
        self.located, self.problems, self.count = located, problems, 0
        self.scalars = yaml.constructor.SafeConstructor()

    def build(self, node: yaml.Node, path: Path_) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            line, col = _mark(node)
            raise _TooBig(
                YamlProblem(line, col, f"document expands to over {MAX_NODES} values (alias bomb?)")
            )
        self.located.values.setdefault(path, _mark(node))
        if node.tag not in _STANDARD_TAGS:
            line, col = _mark(node)
            self.problems.append(
                YamlProblem(line, col, f"tag {node.tag!r} is not allowed", "plain YAML values")
            )
            return None
        if isinstance(node, yaml.MappingNode):
            result: dict[str, Any] = {}
            for key_node, value_node in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    line, col = _mark(key_node)
                    self.problems.append(YamlProblem(line, col, "merge keys (<<) not supported"))
                    continue
                key = self.build(key_node, path + ("<key>",))
                if not isinstance(key, str):
                    key = str(key)
                if key in result:
                    line, col = _mark(key_node)
                    first = self.located.keys[path + (key,)][0]
                    self.problems.append(
                        YamlProblem(
                            line,
                            col,
                            f"duplicate key {key!r} (first on line {first})",
                            "each key once",
                        )
                    )
                    continue
                self.located.keys[path + (key,)] = _mark(key_node)
                result[key] = self.build(value_node, path + (key,))
            return result
        if isinstance(node, yaml.SequenceNode):
            return [self.build(item, path + (i,)) for i, item in enumerate(node.value)]
        value = self.scalars.construct_object(node)
        return value.isoformat() if hasattr(value, "isoformat") else value
