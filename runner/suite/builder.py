"""Validated suite data -> ``Suite``: the checks only code can make (files named, symbolic dims
pinned, tensors within the memory budget, rules that name what exists), every problem collected
and raised at once as ``InvalidInput``."""

from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import math
import os
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from pathlib import Path

from runner.cause import parse_cause
from runner.errors import InvalidInput, Problem
from runner.packages import PackageFile
from runner.suite.decoders import (
    builtin_decoder_tensors,
    decoder_file,
    generation_loop,
    loop_tensors,
)
from runner.suite.onnxfile import OnnxFile, read_onnx
from runner.suite.optests import DEFAULT_OPSET, op_test_files, read_op_tests
from runner.suite.scenarios import Scenario, parse_scenario
from runner.suite.spec import (
    DEFAULT_LAYOUT,
    MODES,
    SCENARIO_FIELDS,
    STATIC_SHAPE,
    BackendTarget,
    BufferModes,
    CaseRule,
    DecoderParams,
    EncoderParams,
    Expectation,
    InputSpec,
    Layout,
    ModelSpec,
    Shape,
    Suite,
    TargetParser,
    TargetProblem,
    Tolerance,
    cell_values,
    entry_matches,
    label_versions,
)
from runner.suite.yamlpos import Located
from runner.uniforms import UNIFORM_FIELDS

# Refuse a shape before anything is allocated if one tensor would pass this.
MAX_TENSOR_BYTES = int(os.environ.get("REGRESS_MAX_TENSOR_MIB", "1024")) << 20
BUILTIN_DIMS = {"encoder": ("batch", "sequence")}
# What one builtin takes and the other does not (both: layers, hidden, heads, vocab, seed).
ENCODER_KEYS = frozenset({"style", "ffn", "eps", "activation", "max_positions"})
DECODER_KEYS = frozenset({"kv_heads", "intermediate", "max_length", "quantized", "generate"})


def _repository_root(path: Path) -> Path:
    """The work tree holding `path` (the nearest folder above it with a ``.git``, a folder or a
    worktree's file), or its folder when it is in none: from files alone, as loading must be."""
    folder = path.resolve().parent
    for candidate in (folder, *folder.parents):
        if (candidate / ".git").exists():
            return candidate
    return folder


def _largest_encoder_tensor(encoder: EncoderParams, shape: dict[str, int]) -> int:
    """Elements of the builtin encoder's largest tensor: activations, scores or tables."""
    batch, sequence = shape["batch"], shape["sequence"]
    return max(
        batch * sequence * max(encoder.hidden, encoder.ffn),
        batch * encoder.heads * sequence * sequence,
        encoder.vocab * encoder.hidden,
        encoder.max_positions * encoder.hidden,
    )


def _largest_input(inputs: dict[str, list[int | str]], shape: dict[str, int]) -> int:
    """Elements of a model file's largest input (its intermediates are unknown before running)."""
    return max(
        (
            math.prod(shape.get(d, 1) if isinstance(d, str) else max(d, 1) for d in dims)
            for dims in inputs.values()
        ),
        default=0,
    )


class SuiteBuilder:
    """Turns validated data into a Suite, collecting the problems only code can see."""

    def __init__(self, located: Located, backends: Mapping[str, TargetParser]):
        self.located, self.data, self.file = located, located.data, located.file
        self.backends = backends
        self.problems: list[Problem] = []
        self.unchecked: list[Problem] = []  # what files alone cannot tell (``Suite.unchecked``)
        self.dims_of_models: list[set[str] | None] = []  # each model's symbolic dims, if known
        self.root = _repository_root(self.file.resolve())

    def problem(self, path: tuple, message: str, expected: str = "", key: bool = False) -> None:
        line, col = self.located.where(path, key=key)
        self.problems.append(Problem(self.file, line, col, message, expected))

    def problem_under(self, entry: tuple, path: tuple, message: str, expected: str) -> None:
        """A problem at `path` under `entry`, as a check handed one entry tells it."""
        self.problem(entry + path, message, expected)

    def build(self) -> Suite:
        data = self.data
        shapes = tuple(self.shape(s) for s in data.get("shapes", ()))
        layouts = self.layouts(data.get("layouts"))
        models = tuple(
            dataclasses.replace(
                model,
                buffers=spec.get("buffers", {}),
                graphs=spec.get("graphs", 1),
            )
            for name, spec in data["models"].items()
            for model in (
                self.op_tests(name, spec)
                if "ort_op_tests" in spec
                else [self.model(name, spec, shapes, layouts)]
            )
        )
        self.check_shape_dims(shapes)
        op_tests = [name for name, spec in data["models"].items() if "ort_op_tests" in spec]
        if op_tests and layouts != (DEFAULT_LAYOUT,):
            self.problem(
                ("layouts",),
                f"ORT-web op tests ({', '.join(op_tests)}) run under the default layout only",
                "no `layouts:` in a suite of op tests",
            )
        declared = [t for i, spec in enumerate(data["backends"]) for t in self.backend(i, spec)]
        backends = tuple(dict.fromkeys(label_versions(declared).values()))
        capture = data.get("capture", ["eager", "capture"])
        capture = [capture] if isinstance(capture, str) else capture
        self.check_matrix_entries(models, layouts, backends)
        scenarios = self.scenarios(data.get("scenarios", ()), models, shapes)
        suite = Suite(
            name=data.get("name", self.file.stem),
            path=self.file.resolve(),
            models=models,
            shapes=shapes,
            layouts=layouts,
            backends=backends,
            capture=tuple(mode for mode in MODES if mode in capture),
            tolerance=Tolerance(**data.get("tolerance", {})),
            cases=tuple(
                self.case_rule(rule, i, scenarios) for i, rule in enumerate(data.get("cases", ()))
            ),
            include=tuple(data.get("include", ())),
            exclude=tuple(data.get("exclude", ())),
            tags=frozenset(data.get("tags", ())),
            description=data.get("description", ""),
            timeout_s=float(data.get("timeout", 120.0)),
            buffers=BufferModes(**data.get("buffers", {})),
            home=tuple(
                dict.fromkeys(
                    dataclasses.replace(t, version=None, label=None, declared=None, source=None)
                    for t in backends
                )
            ),
            scenarios=scenarios,
            unchecked=tuple(
                sorted(
                    {
                        dataclasses.replace(
                            target.source,
                            message=f"{target.name} version {target.declared!r} was not "
                            "checked (only a registry knows it): it is resolved when its cases "
                            "run or are listed",
                        )
                        for target in declared
                        if target.version is None and target.source is not None
                    }
                    | set(self.unchecked),
                    key=lambda note: (note.line, note.column),
                )
            ),
        )
        if not self.problems:
            self.check_new_combinations(suite)
        if self.problems:  # the suite's own first, then those of files it names
            raise InvalidInput(
                sorted(
                    self.problems,
                    key=lambda p: (p.file != self.file, str(p.file), p.line, p.column),
                )
            )
        return suite

    @staticmethod
    def shape(spec: dict) -> Shape:
        return Shape(tuple(spec.items()))

    def layouts(self, specs: list | None) -> tuple[Layout, ...]:
        if not specs:
            return (DEFAULT_LAYOUT,)
        layouts: list[tuple[int, Layout]] = []  # (index of the spec it came from, layout)
        for i, spec in enumerate(specs):
            path = ("layouts", i)
            if isinstance(spec, list):
                self.check_fields(spec, path)
                layouts.append((i, Layout(",".join(spec), tuple(spec))))
            elif "permute" in spec:
                self.check_fields(spec["permute"], path + ("permute",))
                layouts += [
                    (i, Layout(",".join(p), p)) for p in itertools.permutations(spec["permute"])
                ]
            else:
                order = tuple(spec.get("order", ()))
                self.check_fields(order, path + ("order",))
                values = tuple(sorted(spec.get("values", {}).items()))
                preferred = spec.get("preferred_layout")
                label = spec.get("label") or "+".join(
                    part
                    for part in (
                        ",".join(order),
                        ",".join(f"{k}={v:g}" for k, v in values),
                        preferred or "",
                    )
                    if part
                )
                layouts.append((i, Layout(label, order, values, preferred)))
        seen: set[str] = set()
        for i, layout in layouts:
            if layout.label in seen:
                self.problem(
                    ("layouts", i),
                    f"layout label {layout.label!r} is used twice",
                    "distinct labels (give one with `label:`)",
                )
            seen.add(layout.label)
        return tuple(layout for _, layout in layouts)

    def check_fields(self, names: Iterable[str], path: tuple) -> None:
        for j, name in enumerate(names):
            if name not in UNIFORM_FIELDS:
                self.problem(
                    path + (j,),
                    f"unknown uniform field {name!r}",
                    "one of " + ", ".join(UNIFORM_FIELDS),
                )

    def model(self, name: str, spec: dict, shapes: tuple, layouts: tuple) -> ModelSpec:
        path = ("models", name)
        inputs = {
            key: self.input_spec(value, path + ("inputs", key))
            for key, value in spec.get("inputs", {}).items()
        }
        own_shapes = tuple(self.shape(s) for s in spec.get("shapes", ()))
        if spec.get("builtin") == "decoder" or "generate" in spec:  # `path:` + `generate:`
            return dataclasses.replace(self.decoder(name, spec, layouts), line=self.line(path))
        if "builtin" in spec:
            self.refuse_keys(spec, path, DECODER_KEYS, "the builtin encoder")
            params = {k: v for k, v in spec.items() if k in EncoderParams.__dataclass_fields__}
            encoder = EncoderParams(**params)
            model = ModelSpec(
                name, builtin=spec["builtin"], encoder=encoder, inputs=inputs, shapes=own_shapes
            )
            self.check_heads(encoder, path, layouts)
            if encoder.dtype != "float32" and encoder.style != "compact":
                self.problem(
                    path + ("dtype",),
                    f"dtype {encoder.dtype} of the {encoder.style} style",
                    "float32: only the compact style is built in float16",
                )
            dims = set(BUILTIN_DIMS[spec["builtin"]])
            names = {"compact": {"x"}, "exported": {"input_ids", "attention_mask"}}[encoder.style]
            largest = partial(_largest_encoder_tensor, encoder)
        else:
            if "package" in spec:
                model = self.package_model(name, spec["package"], inputs, own_shapes)
                read = self.packaged_file(model, path + ("package",))
            else:
                model_path = (self.file.parent / spec["path"]).resolve()
                model = ModelSpec(name, path=model_path, inputs=inputs, shapes=own_shapes)
                read = self.model_file(model_path, path + ("path",))
            input_dims = read.inputs if read is not None else None
            names = set(input_dims) if input_dims is not None else None
            dims = {d for ds in (input_dims or {}).values() for d in ds if isinstance(d, str)}
            largest = partial(_largest_input, input_dims or {})
            for layout in layouts:
                if "heads" in layout.values_dict():
                    self.problem(
                        ("layouts",),
                        f"layout {layout.label!r} changes heads, which "
                        f"model {name!r} (an ONNX file) cannot",
                        "eps only",
                    )
        for key in inputs:
            if names is not None and key not in names:
                self.problem(
                    path + ("inputs", key),
                    f"model {name!r} has no input {key!r}",
                    "one of " + ", ".join(sorted(names)),
                    key=True,
                )
        if names is not None:  # its dims are known: a shape names no other
            self.dims_of_models.append(dims)
            for i, shape in enumerate(own_shapes):
                for dim in shape.as_dict().keys() - dims:
                    self.problem(
                        path + ("shapes", i, dim),
                        f"model {name!r} has no symbolic dim {dim!r}",
                        f"one of {', '.join(sorted(dims))}" if dims else "no shape (it has none)",
                        key=True,
                    )
        else:
            self.dims_of_models.append(None)
        if model.package is not None:  # its cases do not hang on whether it is fetched yet
            shapes = (STATIC_SHAPE,)
        if dims:
            self.check_pinned(
                name,
                dims,
                own_shapes or shapes,
                largest,
                path + ("shapes",) if own_shapes else ("shapes",),
            )
        elif not own_shapes:  # nothing to pin: one static case, whatever the suite's `shapes:`
            model = dataclasses.replace(model, shapes=(STATIC_SHAPE,))
        return dataclasses.replace(model, line=self.line(path))

    def decoder(self, name: str, spec: dict, layouts: tuple) -> ModelSpec:
        """A decoder and its generation loop: the builtin, or an ONNX file of its shape
        (``path:`` with ``generate:``). Its one shape is the loop's: a decode step's (one token,
        the static mask and caches max_length wide), which captures."""
        path = ("models", name)
        what = "a decoder file" if "path" in spec else "a builtin decoder"
        self.refuse_keys(spec, path, ENCODER_KEYS, "the builtin decoder")
        for key in ("inputs", "shapes"):
            if key in spec:
                self.problem(
                    path + (key,),
                    f"model {name!r} is {what}, whose {key} its generation loop sets",
                    "no `inputs:` or `shapes:` on a decoder (`generate:` sets its loop)",
                    key=True,
                )
        for layout in layouts:
            if layout.values:
                self.problem(
                    ("layouts",),
                    f"layout {layout.label!r} changes {', '.join(dict(layout.values))}, which "
                    f"model {name!r} ({what}) cannot",
                    "layouts that order uniform fields only",
                )
        model_path, dims, source = None, None, None
        if "package" in spec:
            source = self.package_source(name, spec["package"])
            model_path = source.cached
        elif "path" in spec:
            model_path = (self.file.parent / spec["path"]).resolve()
        sized = True  # whether `params` are the model's own, not a stand-in for a file unread
        if source is not None and not model_path.is_file():
            # its sizes are the file's, read once a run has fetched it (its cases skip until
            # then); the suite's max_length still bounds the loop
            length = spec.get("max_length", DecoderParams.max_length)
            params, dims, sized = DecoderParams(max_length=length, static_mask=True), {}, False
        elif model_path is not None:
            inside = source and model_path.parent
            read = self.model_file(model_path, path + ("package" if inside else "path",), inside)
            report = partial(self.problem_under, path)
            found = read and decoder_file(model_path, read, name, spec, report)
            params, dims = found or (DecoderParams(static_mask=True), None)
            sized = dims is not None
        else:
            fields = {k: v for k, v in spec.items() if k in DecoderParams.__dataclass_fields__}
            caches = fields.get("dtype", "float32")  # the builtin's caches are of its float type
            try:
                # accuracy_level 0: onnxruntime CPU dequantizes exactly, as every backend does
                params = DecoderParams(
                    **fields, accuracy_level=0, static_mask=True, cache_dtype=caches
                )
            except ValueError as exc:
                self.problem(path, f"model {name!r}: {exc}", "sizes GroupQueryAttention takes")
                params = DecoderParams(static_mask=True)
        report = partial(self.problem_under, path + ("generate",))
        loop = generation_loop(name, spec.get("generate", {}), params, report)
        for j, token in enumerate((loop.tokens or ()) if sized else ()):
            if token >= params.vocab:
                self.problem(
                    path + ("generate", "prompt", j),
                    f"token id {token} of model {name!r}'s prompt",
                    f"ids below its vocabulary ({params.vocab})",
                )
        tensors = loop_tensors if model_path else builtin_decoder_tensors
        elements, key, what = max(tensors(params, loop))
        self.check_budget(path + key, elements, f"model {name!r} needs", f" for {what}")
        length = params.max_length
        if dims is None:  # the builtin's dim names
            dims = {"batch_size": 1, "sequence_length": 1}
            dims |= {"total_sequence_length": length, "past_sequence_length": length}
        return ModelSpec(
            name,
            builtin=None if model_path else "decoder",
            path=model_path,
            package=source,
            decoder=params,
            loop=loop,
            shapes=(Shape(tuple(dims.items())),),
        )

    def refuse_keys(self, spec: dict, path: tuple, keys: frozenset[str], what: str) -> None:
        for key in sorted(keys & set(spec)):
            self.problem(
                path + (key,),
                f"{key!r} is not a parameter of {what}",
                "its own parameters (docs/writing-suites.md#decoders-and-generation-loops)",
                key=True,
            )

    def line(self, path: tuple) -> int:
        """The line of the key at `path` (a model's name), for reports that link to it."""
        return self.located.where(path, key=True)[0]

    def op_tests(self, name: str, spec: dict) -> list[ModelSpec]:
        """One model per case of the ORT-web op-test files `spec` names (``optests.py``).

        The files may live anywhere (a checkout of onnxruntime), unlike model files.
        """
        where = ("models", name, "ort_op_tests")
        try:
            files = op_test_files(spec["ort_op_tests"], self.file.parent)
        except ValueError as exc:
            self.problem(
                where,
                f"ort_op_tests {spec['ort_op_tests']!r}: {exc}",
                "a path or glob, with only variables that are set",
            )
            return []
        if not files:
            self.problem(
                where,
                f"no op-test files match {spec['ort_op_tests']!r}",
                "a .jsonc file, a folder of them, or a glob",
            )
            return []
        models, problems = read_op_tests(files, name, spec.get("opset", DEFAULT_OPSET))
        self.problems += problems
        return [dataclasses.replace(model, line=self.line(("models", name))) for model in models]

    def check_heads(self, encoder: EncoderParams, path: tuple, layouts: tuple) -> None:
        for heads, where in [(encoder.heads, path + ("heads",))] + [
            (layout.values_dict()["heads"], ("layouts",))
            for layout in layouts
            if "heads" in layout.values_dict()
        ]:
            if encoder.hidden % int(heads):
                self.problem(
                    where,
                    f"heads={heads} does not divide hidden={encoder.hidden}",
                    "a divisor of hidden",
                )

    def check_shape_dims(self, shapes: tuple[Shape, ...]) -> None:
        """Every dim the suite's `shapes:` name is some model's, where every model's dims are
        known (a package not fetched yet hides its own)."""
        if None in self.dims_of_models:
            return
        dims = set().union(*self.dims_of_models)
        for i, shape in enumerate(shapes):
            for dim in shape.as_dict().keys() - dims:
                self.problem(
                    ("shapes", i, dim),
                    f"no model of the suite has a symbolic dim {dim!r}",
                    f"one of {', '.join(sorted(dims))}" if dims else "no `shapes:`",
                    key=True,
                )

    def check_pinned(
        self, name: str, dims: set, shapes: tuple, largest: Callable[[dict], int], path: tuple
    ) -> None:
        """Every symbolic dim pinned, and no tensor past the memory budget, per shape."""
        if not shapes:
            self.problem(
                ("models", name),
                f"model {name!r} has symbolic dims "
                f"{', '.join(sorted(dims))} and no shapes pin them",
                "a `shapes:` list",
            )
        for i, shape in enumerate(shapes):
            missing = sorted(dims - set(shape.as_dict()))
            if missing:
                self.problem(
                    path + (i,),
                    f"symbolic dim {', '.join(missing)} of model {name!r} is left unpinned",
                    "a value for every symbolic dim",
                )
                continue
            self.check_budget(
                path + (i,), largest(shape.as_dict()), f"shape {shape.label} gives model {name!r}"
            )

    def check_budget(self, path: tuple, elements: int, subject: str, detail: str = "") -> None:
        """Refuse a float32 tensor past MAX_TENSOR_BYTES before anything is allocated: it would
        fail every case at run time (a MemoryError), or take the machine's memory."""
        size = elements * 4
        if size > MAX_TENSOR_BYTES:
            self.problem(
                path,
                f"{subject} a tensor of {size / 2**20:,.0f} MiB{detail}",
                f"at most {MAX_TENSOR_BYTES >> 20} MiB "
                "per tensor (REGRESS_MAX_TENSOR_MIB raises it)",
            )

    def package_source(self, name: str, spec: dict) -> PackageFile:
        """Model `name`'s `package:`, checked against its wheel where a fetch recorded what the
        wheel holds; else said to be unchecked (loading never downloads)."""
        fields = ("name", "version", "file", "sha256", "license")
        source = PackageFile(*(spec[key] for key in fields), export=spec.get("export"))
        where = ("models", name, "package")
        files = source.wheel_files()
        if files is None:
            line, column = self.located.where(where)
            self.unchecked.append(
                Problem(
                    self.file,
                    line,
                    column,
                    f"model {name!r}: {source.label} was not checked (not fetched yet): a run "
                    "fetches it and checks its file and sha256",
                )
            )
        elif (wrong := source.disagreement(files)) is not None:
            key, message = wrong
            self.problem(
                (*where, key),
                f"model {name!r}: {message}",
                "`package:` naming a file its wheel holds, with that file's sha256",
            )
        return source

    def package_model(
        self, name: str, spec: dict, inputs: Mapping[str, InputSpec], shapes: tuple[Shape, ...]
    ) -> ModelSpec:
        source = self.package_source(name, spec)
        return ModelSpec(name, path=source.cached, package=source, inputs=inputs, shapes=shapes)

    def packaged_file(self, model: ModelSpec, where: tuple) -> OnnxFile | None:
        """A package model's inputs once a run has fetched it into the cache; until then
        nothing (loading reads files only: the run fetches, ``runner.packages``)."""
        if model.path is None or not model.path.is_file():
            return None
        return self.model_file(model.path, where, inside=model.path.parent)

    def model_file(
        self, model_path: Path, where: tuple, inside: Path | None = None
    ) -> OnnxFile | None:
        """An ONNX file's inputs and outputs, after checking the file is usable and inside the
        repository (or `inside`)."""
        if not model_path.is_relative_to(inside or self.root):
            self.problem(
                where,
                f"model path resolves outside the repository ({self.root})",
                "a path inside the repository holding the suite",
            )
            return None
        if not model_path.is_file():
            self.problem(where, f"model file {model_path} does not exist", "an ONNX file")
            return None
        try:
            read = read_onnx(model_path)
        except Exception as exc:  # onnx raises DecodeError, ValueError, ... for non-ONNX bytes
            self.problem(
                where,
                f"{model_path.name} is not an ONNX model ({type(exc).__name__})",
                "an ONNX file",
            )
            return None
        if read.empty:
            self.problem(
                where, f"{model_path.name} is not an ONNX model (empty graph)", "an ONNX file"
            )
        return read

    def input_spec(self, spec: dict, path: tuple) -> InputSpec:
        low, high = spec.get("range", (None, None))
        npy = None
        if "npy" in spec:
            npy = (self.file.parent / spec["npy"]).resolve()
            if not npy.is_relative_to(self.root):
                self.problem(
                    path + ("npy",),
                    "npy path resolves outside the repository",
                    "a path inside the repository holding the suite",
                )
            elif not npy.is_file():
                self.problem(path + ("npy",), f"npy file {npy} does not exist", "a .npy file")
        if low is not None and not low < high:
            self.problem(path + ("range",), f"range [{low}, {high}) is empty", "low < high")
        return InputSpec(spec.get("dtype"), low, high, spec.get("fill"), spec.get("seed"), npy)

    def scenarios(self, specs, models: tuple, shapes: tuple) -> tuple[Scenario, ...]:
        """The `scenarios:` entries (runner.suite.scenarios), names unique."""
        by_name = {model.name: model for model in models}
        parsed = []
        for i, spec in enumerate(specs):
            path = ("scenarios", i)
            if spec["name"] in {s["name"] for s in specs[:i]}:
                self.problem((*path, "name"), f"scenario {spec['name']!r} again", "unique names")
            model = by_name.get(spec.get("model"))
            if model is not None and model.loop is not None:
                self.problem(
                    (*path, "model"),
                    f"model {model.name!r} is a decoder, whose runs its generation loop sets",
                    "an encoder or a model file",
                )
                continue
            backends = tuple(
                t for j, b in enumerate(spec.get("backends", ())) for t in self.backend(j, b, path)
            )
            scenario = parse_scenario(
                spec,
                path,
                by_name,
                lambda model: (model.shapes or shapes or (STATIC_SHAPE,))[0],
                backends,
                lambda at: self.located.where(at)[0],
                lambda at, message, expected: self.problem(at, message, expected),
            )
            parsed += [scenario] if scenario else []
        return tuple(parsed)

    def backend(
        self, index: int, spec: str | dict, within: tuple = ()
    ) -> tuple[BackendTarget, ...]:
        """The targets of ``backends[index]`` (of the entry at `within`: a scenario's), each
        knowing where its version is spelt; a version only a registry can resolve stays
        unresolved."""
        spec = {"name": spec} if isinstance(spec, str) else spec
        try:
            targets = self.backends[spec["name"]].targets(spec, self.file.parent)
        except TargetProblem as problem:
            for where, message, expected in problem.problems:
                self.problem((*within, "backends", index, *where), message, expected)
            return ()
        declared = spec.get("version")
        if isinstance(declared, str):
            spelt = [(declared, ("version",))]
        else:
            spelt = [(text, ("version", i)) for i, text in enumerate(declared or [])]
        sources = {}
        for text, path in spelt:
            line, column = self.located.where((*within, "backends", index, *path))
            sources[text] = Problem(self.file, line, column, "")
        return tuple(
            dataclasses.replace(target, source=sources.get(target.declared)) for target in targets
        )

    def case_rule(self, rule: dict, index: int, scenarios: tuple[Scenario, ...]) -> CaseRule:
        expect = rule.get("expect", "pass")
        expect = frozenset([expect] if isinstance(expect, str) else expect)
        tolerance = Tolerance(**rule["tolerance"]) if "tolerance" in rule else None
        parsed = CaseRule(
            rule["match"],
            Expectation(
                expect,
                rule.get("bug"),
                rule.get("reason"),
                parse_cause(rule["cause"]) if "cause" in rule else None,
            ),
            tolerance,
            frozenset(rule.get("inject", ())),
            rule.get("buffers", {}),
            rule.get("graphs"),
        )
        if parsed.for_scenarios:
            self.check_scenario_rule(rule, ("cases", index), scenarios)
        return parsed

    def check_scenario_rule(self, rule: dict, path: tuple, scenarios: tuple) -> None:
        """A rule naming ``scenario`` matches scenarios only: it matches on their fields, sets
        only what a scenario takes, and names one of the suite's scenarios."""
        for key in sorted(set(rule["match"]) - SCENARIO_FIELDS):
            self.problem(
                (*path, "match", key),
                f"a rule naming `scenario` matches scenarios, which have no {key!r}",
                "one of " + ", ".join(sorted(SCENARIO_FIELDS)),
                key=True,
            )
        for key in sorted({"inject", "buffers", "graphs"} & set(rule)):
            self.problem(
                (*path, key),
                f"{key!r} is a case's, not a scenario's (the rule's match names `scenario`)",
                "expect, bug, reason, tolerance",
                key=True,
            )
        glob = str(rule["match"]["scenario"])
        if not any(fnmatch.fnmatchcase(s.name, glob) for s in scenarios):
            names = ", ".join(s.name for s in scenarios) or "(none)"
            self.problem(
                (*path, "match", "scenario"),
                f"scenario {glob!r} matches none of the suite's scenarios",
                f"one of {names}",
            )

    def check_matrix_entries(self, models, layouts, backends) -> None:
        known = {
            "model": {m.name for m in models},
            "layout": {lay.label for lay in layouts},
            "backend": {b.id for b in backends}
            | {b.build_id for b in backends}
            | {b.name for b in backends}
            | {b.id.split(":")[0] for b in backends},
        }
        for section in ("include", "exclude"):
            for i, entry in enumerate(self.data.get(section, ())):
                for key, names in known.items():
                    if key in entry and entry[key] not in names:
                        self.problem(
                            (section, i, key),
                            f"{section} names unknown {key} {entry[key]!r}",
                            "one of " + ", ".join(sorted(names)),
                        )

    def check_new_combinations(self, suite: Suite) -> None:
        """An include entry that extends no combination adds one: it must name it fully."""
        cells = [cell_values(*cell) for cell in suite.base_cells()]
        for i, entry in enumerate(suite.include):
            missing = [k for k in ("model", "shape", "backend") if k not in entry]
            if missing and not any(entry_matches(entry, values) for values in cells):
                self.problem(
                    ("include", i),
                    "include entry matches no combination, so it adds "
                    f"one, but does not name its {', '.join(missing)}",
                    "model, shape and backend",
                )
