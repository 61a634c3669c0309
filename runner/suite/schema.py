"""A suite file's data against ``suite.schema.json``: each violation a Problem at its
``FILE:LINE:COL`` saying what was expected there (for a ``oneOf``, the alternative that got
furthest, not the umbrella), every one of them at once."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema

from runner.errors import Problem
from runner.suite.yamlpos import Located, walk

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "schemas" / "suite.schema.json"


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))


def _expected(error: jsonschema.ValidationError) -> str:
    schema = error.schema if isinstance(error.schema, dict) else {}
    if error.validator == "enum":
        return "one of " + ", ".join(map(str, error.validator_value))
    if error.validator == "type":
        return f"a value of type {error.validator_value}"
    if error.validator == "additionalProperties":
        return "one of " + ", ".join(sorted(schema.get("properties", {}))) or "no other keys"
    if error.validator in ("minimum", "exclusiveMinimum"):
        return f"a number {'>=' if error.validator == 'minimum' else '>'} {error.validator_value}"
    if error.validator == "maximum":
        return f"a number <= {error.validator_value}"
    if error.validator == "pattern":
        return f"text matching {error.validator_value}"
    return schema.get("description", "")


def _leaf_errors(error: jsonschema.ValidationError) -> list[jsonschema.ValidationError]:
    """For oneOf/anyOf, the errors of the alternative that got furthest, not the umbrella."""
    if error.validator not in ("oneOf", "anyOf") or not error.context:
        return [error]
    by_branch: dict[int, list] = {}
    for sub in error.context:
        by_branch.setdefault(sub.schema_path[0], []).append(sub)
    depth = len(error.absolute_path)

    def reach(e: jsonschema.ValidationError) -> int:
        """How deep into the value an error is: an unknown key is one step inside its mapping."""
        return len(e.absolute_path) + (e.validator == "additionalProperties")

    # prefer the branch whose type matched (its errors are deeper), then the fewest errors
    best = max(by_branch.values(), key=lambda errs: (max(map(reach, errs)), -len(errs)))
    if all(len(e.absolute_path) == depth for e in best) and len(by_branch) > 1:
        if all(e.validator in ("type", "enum", "required", "not") for e in best):
            return [error]  # no alternative fits at all: say so once
    return [leaf for sub in best for leaf in _leaf_errors(sub)]


def _non_finite(data: Any) -> Iterable[tuple]:
    """Where `data` holds a NaN or an infinity (YAML's ``.nan``, ``.inf``): JSON Schema's bounds
    let NaN through, and no field of a suite means either."""
    return (p for p, value in walk(data) if isinstance(value, float) and not math.isfinite(value))


def schema_problems(located: Located) -> list[Problem]:
    problems = [
        Problem(located.file, *located.where(path), "not a finite number", "a finite number")
        for path in _non_finite(located.data)
    ]
    errors = _validator().iter_errors(located.data)
    for error in sorted(errors, key=lambda e: list(map(str, e.path))):
        for leaf in _leaf_errors(error):
            path = tuple(leaf.absolute_path)
            if leaf.validator == "additionalProperties":
                allowed = set(leaf.schema.get("properties", {}))
                for key in sorted(set(leaf.instance) - allowed):
                    line, col = located.where(path + (key,), key=True)
                    problems.append(
                        Problem(located.file, line, col, f"unknown key {key!r}", _expected(leaf))
                    )
                continue
            if leaf.validator == "oneOf" and leaf.schema.get("description"):
                message = f"{_describe(leaf.instance)} is not valid here"
                line, col = located.where(path)
                problems.append(
                    Problem(located.file, line, col, message, leaf.schema["description"])
                )
                continue
            line, col = located.where(path)
            problems.append(Problem(located.file, line, col, _message(leaf), _expected(leaf)))
    return sorted(dict.fromkeys(problems), key=lambda p: (p.line, p.column))


def _message(error: jsonschema.ValidationError) -> str:
    if error.validator == "enum":
        return f"{_describe(error.instance)} is not allowed here"
    if error.validator == "required":
        return error.message.replace("is a required property", "is missing")
    return error.message


def _describe(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."
