"""JSON with comments and trailing commas, as ORT-web's op-test files are written.

ORT-web reads them with ``strip-json-comments`` and ``JSON.parse``; this reads the same text and
also remembers where every value and key starts, so a problem in a file can be reported at
``FILE:LINE:COL`` (as a ``runner.suite.yamlpos.Located``, like suite files).
"""

from __future__ import annotations

import bisect
import json
import re
from pathlib import Path
from typing import Any

from runner.suite.yamlpos import Located

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_LITERALS = {"true": True, "false": False, "null": None}
_NOT_SPACE = re.compile(r"\S")
_DECODER = json.JSONDecoder()


class JsoncError(Exception):
    def __init__(self, line: int, column: int, message: str):
        super().__init__(f"{line}:{column}: {message}")
        self.line, self.column, self.message = line, column, message


def load_jsonc(path: Path) -> Located:
    """Parse `path`; raises JsoncError at the first syntax error."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise JsoncError(1, 1, "file is not UTF-8 text") from exc
    return _Parser(text, Located(None, path)).document()


class _Parser:
    def __init__(self, text: str, located: Located):
        self.text, self.located, self.at = text, located, 0
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]

    def position(self, offset: int) -> tuple[int, int]:
        line = bisect.bisect_right(self.line_starts, offset) - 1
        return line + 1, offset - self.line_starts[line] + 1

    def fail(self, message: str, offset: int | None = None) -> JsoncError:
        return JsoncError(*self.position(self.at if offset is None else offset), message)

    def document(self) -> Located:
        self.located.data = self.value(())
        if self.skip() < len(self.text):
            raise self.fail("unexpected text after the document")
        return self.located

    def skip(self) -> int:
        """Past whitespace and comments; returns the offset of the next token."""
        text = self.text
        while self.at < len(text):
            if text[self.at] in " \t\r\n\ufeff":
                self.at += 1
            elif text.startswith("//", self.at):
                end = text.find("\n", self.at)
                self.at = len(text) if end < 0 else end + 1
            elif text.startswith("/*", self.at):
                end = text.find("*/", self.at + 2)
                if end < 0:
                    raise self.fail("comment never closed")
                self.at = end + 2
            else:
                break
        return self.at

    def value(self, path: tuple) -> Any:
        start = self.skip()
        self.located.values[path] = self.position(start)
        if start >= len(self.text):
            raise self.fail("unexpected end of file; expected a value")
        char = self.text[start]
        if char == "{":
            return self.members(path)
        if char == "[":
            return self.flat_list(path) if self.is_flat_list(start) else self.items(path)
        if char == '"':
            return self.string()
        number = _NUMBER.match(self.text, start)
        if number:
            self.at = number.end()
            token = number.group()
            return float(token) if any(c in token for c in ".eE") else int(token)
        for word, literal in _LITERALS.items():
            if self.text.startswith(word, start):
                self.at = start + len(word)
                return literal
        raise self.fail(f"unexpected {char!r}; expected a value")

    def is_flat_list(self, start: int) -> bool:
        """A list of scalars (tensor data, dims): worth json's fast C parser."""
        first = _NOT_SPACE.search(self.text, start + 1)
        return first is not None and first.group() not in "[{/"

    def flat_list(self, path: tuple) -> list:
        """A list of scalars in plain JSON, parsed fast without the positions of its items;
        one with a comment or a trailing comma is parsed item by item like any other."""
        try:
            value, self.at = _DECODER.raw_decode(self.text, self.at)
        except json.JSONDecodeError:
            return self.items(path)
        return value

    def string(self) -> str:
        try:
            value, self.at = json.decoder.scanstring(self.text, self.at + 1)
        except json.JSONDecodeError as exc:
            raise self.fail(exc.msg.lower(), exc.pos) from exc
        return value

    def items(self, path: tuple) -> list:
        self.at += 1
        result: list = []
        while self.skip() < len(self.text) and self.text[self.at] != "]":
            result.append(self.value(path + (len(result),)))
            if not self.separator():
                break
        self.close("]")
        return result

    def members(self, path: tuple) -> dict:
        self.at += 1
        result: dict[str, Any] = {}
        while self.skip() < len(self.text) and self.text[self.at] != "}":
            if self.text[self.at] != '"':
                raise self.fail("expected a quoted key")
            key_at = self.position(self.at)
            key = self.string()
            if key in result:
                raise JsoncError(*key_at, f"duplicate key {key!r}")
            self.located.keys[path + (key,)] = key_at
            if self.skip() >= len(self.text) or self.text[self.at] != ":":
                raise self.fail(f"expected ':' after key {key!r}")
            self.at += 1
            result[key] = self.value(path + (key,))
            if not self.separator():
                break
        self.close("}")
        return result

    def separator(self) -> bool:
        """Past a ',' (a trailing one before the closing bracket too); False when none."""
        if self.skip() < len(self.text) and self.text[self.at] == ",":
            self.at += 1
            return True
        return False

    def close(self, closing: str) -> None:
        if self.skip() >= len(self.text) or self.text[self.at] != closing:
            raise self.fail(f"expected ',' or {closing!r}")
        self.at += 1
