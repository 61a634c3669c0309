"""Read ORT-web's operator test files (``js/web/test/data/ops/*.jsonc``) as they are.

A file is a list of tests; a test names an operator, optionally its opset, attributes, input
shape definitions and a platform condition, and lists cases of input and expected output
tensors. Each case becomes one model of the suite, named ``<model>/<file>/<test>/<case>``.

Text that is not in that format (a syntax error, a missing field, a value of the wrong type) is
a problem at ``FILE:LINE:COL``. What ORT-web's own runner accepts as text but refuses when it runs
(cases of one test disagreeing on their inputs, data that does not fill its dims) marks the cases
``invalid``: they fail alone, as ``error``, and the rest of the files still run.
"""

from __future__ import annotations

import glob
import math
import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from runner.errors import Problem
from runner.suite.jsonc import JsoncError, load_jsonc
from runner.suite.spec import ModelSpec, OpAttribute, OpTensor, OpTest, OpTestCase, Shape
from runner.suite.yamlpos import Located

# ORT-web's runner gives a test without `opset` the highest opset of the ONNX node tests it
# downloads (js/scripts/prepare-onnx-node-tests.ts); a suite's `opset:` overrides it.
DEFAULT_OPSET = 18

TENSOR_TYPES = (
    "float32", "float16", "float64", "int8", "int16", "int32", "int64", "uint8", "uint16",
    "uint32", "uint64", "bool", "string",
)  # fmt: skip

# Attribute type -> (element check, whether a list). JSON has no int/float split: a float
# attribute may be written 1, an int one may not be 1.5.
_ATTRIBUTE_TYPES = {
    "int": ("integer", False),
    "float": ("number", False),
    "string": ("string", False),
    "ints": ("integer", True),
    "floats": ("number", True),
    "strings": ("string", True),
}
SHAPE_KEYWORDS = ("none", "rankOnly", "static")


def op_test_files(pattern: str, base: Path) -> list[Path]:
    """The files a suite's ``ort_op_tests:`` names: a file, a folder (its *.json and *.jsonc, as
    ORT-web loads them) or a glob; ``~`` and ``$VARS`` expanded, relative paths against `base`.

    Raises ValueError for an environment variable that is not set.
    """
    expanded = os.path.expandvars(os.path.expanduser(pattern))
    unset = re.search(r"\$\{?(\w+)", expanded)
    if unset:
        raise ValueError(f"environment variable {unset.group(1)} is not set")
    path = base / expanded
    if path.is_dir():
        return sorted(p for p in path.iterdir() if p.suffix in (".json", ".jsonc") and p.is_file())
    return sorted(Path(p) for p in glob.glob(str(path), recursive=True) if Path(p).is_file())


def read_op_tests(
    files: Iterable[Path], model_name: str, default_opset: int = DEFAULT_OPSET
) -> tuple[list[ModelSpec], list[Problem]]:
    """One model per case of every test in `files`, and every problem found in them."""
    models: list[ModelSpec] = []
    problems: list[Problem] = []
    stems = _Unique()
    for path in files:
        try:
            located = load_jsonc(path)
        except (JsoncError, OSError) as exc:
            line, col = (exc.line, exc.column) if isinstance(exc, JsoncError) else (1, 1)
            message = exc.message if isinstance(exc, JsoncError) else str(exc)
            problems.append(
                Problem(path, line, col, f"not an op-test file: {message}", "JSON with comments")
            )
            continue
        reader = _FileReader(located, default_opset)
        prefix = f"{model_name}/{stems.name(_part(path.stem))}"
        for case, shape in reader.cases():
            models.append(
                ModelSpec(f"{prefix}/{case.test.name}/{case.name}", shapes=(shape,), op_test=case)
            )
        problems += reader.problems
    return models, problems


def _part(name: str) -> str:
    """A name as one part of a case id: no '/', whitespace collapsed."""
    return " ".join(name.replace("/", "-").split())


class _Unique:
    """Names made unique in order of appearance: a repeated one gets " #2", " #3", ..."""

    def __init__(self) -> None:
        self.seen: set[str] = set()

    def name(self, name: str) -> str:
        unique, n = name, 1
        while unique in self.seen:
            n += 1
            unique = f"{name} #{n}"
        self.seen.add(unique)
        return unique


class _FileReader:
    def __init__(self, located: Located, default_opset: int):
        self.located, self.default_opset = located, default_opset
        self.problems: list[Problem] = []

    def problem(self, path: tuple, message: str, expected: str = "", key: bool = False) -> None:
        line, col = self.located.where(path, key=key)
        self.problems.append(Problem(self.located.file, line, col, message, expected))

    def cases(self) -> list[tuple[OpTestCase, Shape]]:
        data = self.located.data
        if not isinstance(data, list):
            self.problem((), "an op-test file holds a list of tests", "[ {name, operator, cases} ]")
            return []
        names = _Unique()
        return [case for i, test in enumerate(data) for case in self.test(test, (i,), names)]

    # -- one test ------------------------------------------------------------------------------

    def test(self, entry: Any, path: tuple, names: _Unique) -> list[tuple[OpTestCase, Shape]]:
        if not isinstance(entry, dict):
            self.problem(path, "a test is an object", "{name, operator, cases}")
            return []
        before = len(self.problems)
        name = self.field(entry, path, "name", str, required=True)
        operator = self.field(entry, path, "operator", str, required=True)
        domain, version = self.opset(entry, path)
        attributes = self.attributes(entry, path)
        shape_spec = entry.get("inputShapeDefinitions")
        shape_spec = "none" if shape_spec is None else shape_spec
        self.check_shape_definitions(shape_spec, path + ("inputShapeDefinitions",))
        condition = self.field(entry, path, "platformCondition", str) or None
        if condition is not None:
            try:
                re.compile(condition)
            except re.error as exc:
                self.problem(
                    path + ("platformCondition",),
                    f"platformCondition {condition!r} is not a regular expression ({exc})",
                    "a regular expression",
                )
        raw_cases = self.field(entry, path, "cases", list, required=True) or []
        cases = [self.case(c, path + ("cases", j)) for j, c in enumerate(raw_cases)]
        if len(self.problems) > before or not cases:
            return []  # a test without cases: ORT-web's runner skips it too
        first = cases[0]
        test = OpTest(
            file=self.located.file,
            name=names.name(_part(name) or f"test {path[0]}"),
            operator=operator,
            domain="" if domain in ("", "ai.onnx") else domain,
            opset=version,
            attributes=attributes,
            input_types=tuple(t.type if _given(t) else None for t in first["inputs"]),
            output_types=tuple(t.type for t in first["outputs"]),
            input_shapes=_input_shapes(shape_spec, first["inputs"]),
            platform_condition=condition,
        )
        refused = _refused_test(test, shape_spec, cases)
        case_names = _Unique()
        result = []
        for j, case in enumerate(cases):
            inputs = tuple(t if _given(t) else None for t in case["inputs"])
            outputs = tuple(t if _given(t) else None for t in case["outputs"])
            pins, invalid = {}, refused
            if not refused:
                pins, conflict = _pins(test, inputs)
                invalid = _refused_case(test, inputs, outputs) or conflict
            op_case = OpTestCase(
                test=test,
                name=case_names.name(_part(case["name"]) or f"case {j}"),
                inputs=inputs,
                outputs=outputs,
                invalid=invalid,
            )
            result.append((op_case, Shape(tuple(pins.items()))))
        return result

    def field(self, entry: dict, path: tuple, key: str, kind: type, required: bool = False):
        if key not in entry:
            if required:
                self.problem(path, f"field {key!r} is missing")
            return None
        value = entry[key]
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            self.problem(path + (key,), f"{key!r} is {_json_type(value)}", f"{_TYPE_NAMES[kind]}")
            return None
        return value

    def opset(self, entry: dict, path: tuple) -> tuple[str, int]:
        opset = self.field(entry, path, "opset", dict)
        if opset is None:
            return "", self.default_opset
        where = path + ("opset",)
        domain = self.field(opset, where, "domain", str) or ""
        version = self.field(opset, where, "version", int, required=True)
        if version is not None and version < 1:
            self.problem(where + ("version",), f"opset version {version}", "a version >= 1")
        return domain, version or self.default_opset

    def attributes(self, entry: dict, path: tuple) -> tuple[OpAttribute, ...]:
        result = []
        for i, attribute in enumerate(self.field(entry, path, "attributes", list) or []):
            where = path + ("attributes", i)
            if not isinstance(attribute, dict):
                self.problem(where, "an attribute is an object", "{name, data, type}")
                continue
            name = self.field(attribute, where, "name", str, required=True)
            kind = self.field(attribute, where, "type", str, required=True)
            if "data" not in attribute:
                self.problem(where, "field 'data' is missing")
            if name is None or kind is None or "data" not in attribute:
                continue
            if kind not in _ATTRIBUTE_TYPES:
                self.problem(
                    where + ("type",),
                    f"unknown attribute type {kind!r}",
                    "one of " + ", ".join(_ATTRIBUTE_TYPES),
                )
                continue
            element, is_list = _ATTRIBUTE_TYPES[kind]
            data = attribute["data"]
            values = data if is_list and isinstance(data, list) else [data]
            if (isinstance(data, list) != is_list) or not all(_is(v, element) for v in values):
                want = f"a list of {element}s" if is_list else f"a {element}"
                self.problem(
                    where + ("data",),
                    f"{kind} attribute {name!r} has data {_json_type(data)}",
                    want,
                )
                continue
            result.append(OpAttribute(name, kind, tuple(data) if is_list else data))
        return tuple(result)

    def check_shape_definitions(self, spec: Any, path: tuple) -> None:
        if isinstance(spec, str) and spec in SHAPE_KEYWORDS:
            return
        expected = "none, rankOnly, static, or a list with per input a list of dims or null"
        if not isinstance(spec, list):
            self.problem(path, f"inputShapeDefinitions is {_json_type(spec)}", expected)
            return
        for i, dims in enumerate(spec):
            if dims is not None and not (
                isinstance(dims, list)
                and all(_is(d, "integer") or isinstance(d, str) for d in dims)
            ):
                self.problem(path + (i,), f"shape definition {_json_type(dims)}", expected)

    # -- one case ------------------------------------------------------------------------------

    def case(self, entry: Any, path: tuple) -> dict[str, Any]:
        if not isinstance(entry, dict):
            self.problem(path, "a case is an object", "{name, inputs, outputs}")
            return {"name": "", "inputs": [], "outputs": []}
        name = self.field(entry, path, "name", str, required=True) or ""
        inputs = self.field(entry, path, "inputs", list, required=True) or []
        outputs = self.field(entry, path, "outputs", list, required=True) or []
        return {
            "name": name,
            "inputs": [self.tensor(t, path + ("inputs", i), True) for i, t in enumerate(inputs)],
            "outputs": [
                self.tensor(t, path + ("outputs", i), False) for i, t in enumerate(outputs)
            ],
        }

    def tensor(self, entry: Any, path: tuple, is_input: bool) -> OpTensor | None:
        """A tensor; None for an omitted input (``null``, or ``data: null`` without a type).

        ``data: null`` with a type keeps the type (an omitted input, or an output left
        unchecked) with ``data`` None.
        """
        if entry is None and is_input:
            return None
        if not isinstance(entry, dict):
            self.problem(path, f"a tensor is {_json_type(entry)}", "{data, dims, type}")
            return None
        data = entry.get("data")
        kind = self.field(entry, path, "type", str, required=data is not None or not is_input)
        if kind is not None and kind not in TENSOR_TYPES:
            self.problem(
                path + ("type",),
                f"unknown tensor type {kind!r}",
                "one of " + ", ".join(TENSOR_TYPES),
            )
            return None
        if data is None:
            return OpTensor(kind, (), None) if kind else None
        dims = self.field(entry, path, "dims", list, required=True)
        if dims is not None and not all(_is(d, "integer") and d >= 0 for d in dims):
            self.problem(path + ("dims",), f"dims {dims}", "a list of sizes >= 0")
            return None
        element = "string" if kind == "string" else "number"
        expected = f"a flat list of {element}s" + (" or booleans" * (kind == "bool"))
        if not isinstance(data, list):
            self.problem(path + ("data",), f"tensor data is {_json_type(data)}", expected)
            return None
        wrong = next((i for i, v in enumerate(data) if not _is(v, element)), None)
        if wrong is not None:
            self.problem(
                path + ("data", wrong),
                f"{kind} tensor data holds {_json_type(data[wrong])}",
                expected,
            )
            return None
        if kind is None or dims is None:
            return None
        return OpTensor(kind, tuple(dims), tuple(data))


def _input_shapes(spec: Any, first: list[OpTensor | None]) -> tuple:
    """Per input, the dims its graph input declares, as ORT-web's runner builds them."""
    if spec == "none":
        return tuple(None for _ in first)
    if spec == "rankOnly":
        return tuple(
            tuple(f"_input_{i}_d{j}" for j in range(len(t.dims))) if _given(t) else None
            for i, t in enumerate(first)
        )
    if spec == "static":
        return tuple(t.dims if _given(t) else None for t in first)
    return tuple(tuple(dims) if dims is not None else None for dims in spec)


def _refused_test(test: OpTest, spec: Any, cases: list[dict[str, Any]]) -> str | None:
    """Why ORT-web's runner refuses the whole test, or None."""
    first = cases[0]
    if any(
        len(c["inputs"]) != len(first["inputs"]) or len(c["outputs"]) != len(first["outputs"])
        for c in cases
    ):
        return "the test's cases differ in how many inputs or outputs they have"
    if isinstance(spec, list) and len(spec) != len(first["inputs"]):
        return f"inputShapeDefinitions has {len(spec)} entries for {len(first['inputs'])} inputs"
    for case in cases:
        for i, (tensor, dims) in enumerate(zip(case["inputs"], test.input_shapes, strict=True)):
            if not _given(tensor) or dims is None:
                continue
            if spec == "rankOnly" and len(tensor.dims) != len(dims):
                return f"inputShapeDefinitions is rankOnly, but input {i}'s rank varies by case"
            if spec == "static" and tensor.dims != dims:
                return f"inputShapeDefinitions is static, but input {i}'s dims vary by case"
    return None


def _refused_case(
    test: OpTest, inputs: tuple[OpTensor | None, ...], outputs: tuple[OpTensor | None, ...]
) -> str | None:
    """Why this case cannot run as a case of the test's model, or None."""
    for i, (tensor, kind) in enumerate(zip(inputs, test.input_types, strict=True)):
        if (tensor is None) != (kind is None):
            given = "omits" if tensor is None else "gives"
            return f"the case {given} input {i}, which the test's first case does not"
        if tensor is not None and tensor.type != kind:
            return f"input {i} is {tensor.type} here, {kind} in the test's first case"
    for role, tensors in (("input", inputs), ("output", outputs)):
        for i, tensor in enumerate(tensors):
            if tensor is not None and len(tensor.data) != math.prod(tensor.dims):
                return (
                    f"{role} {i} has {len(tensor.data)} values for dims "
                    f"{list(tensor.dims)} ({math.prod(tensor.dims)} elements)"
                )
    return None


def _pins(test: OpTest, inputs: tuple[OpTensor | None, ...]) -> tuple[dict[str, int], str | None]:
    """Values of the model's symbolic dims for this case's inputs, and a conflict if any."""
    pins: dict[str, int] = {}
    for i, (tensor, dims) in enumerate(zip(inputs, test.input_shapes, strict=True)):
        if tensor is None or dims is None or len(dims) != len(tensor.dims):
            continue
        for dim, size in zip(dims, tensor.dims, strict=True):
            if isinstance(dim, str):
                if pins.setdefault(dim, size) != size:
                    return pins, (
                        f"symbolic dim {dim!r} is {pins[dim]} in one input and {size} in input {i}"
                    )
    return pins, None


def _given(tensor: OpTensor | None) -> bool:
    """Whether a tensor of the file holds data (else: an omitted input, an unchecked output)."""
    return tensor is not None and tensor.data is not None


def _is(value: Any, element: str) -> bool:
    if element == "string":
        return isinstance(value, str)
    if element == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, int | float)  # number; JSON booleans count (bool tensors)


_TYPE_NAMES = {str: "text", list: "a list", dict: "an object", int: "an integer"}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int | float):
        return f"a number ({value})"
    if isinstance(value, str):
        return f"text ({value!r})"
    return "a list" if isinstance(value, list) else "an object"
