"""Load suite files: safe YAML -> JSON Schema -> checks the schema cannot express -> ``Suite``.

Every problem in a file is collected and raised at once as ``InvalidInput``, each located at
``FILE:LINE:COL``; nothing here runs a model or touches a device, and nothing asks a registry
or the network: loading reads files only (versions only a registry can resolve are left for
``runner.backends.resolve_targets``).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import itertools
import json
import math
import os
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache, partial
from pathlib import Path
from typing import Any

import jsonschema

from runner.cause import parse_cause
from runner.errors import InvalidInput, Problem
from runner.packages import PackageFile
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
    GenerationLoop,
    InputSpec,
    Layout,
    ModelSpec,
    Rewind,
    Shape,
    Suite,
    TargetParser,
    TargetProblem,
    Tolerance,
    cell_values,
    entry_matches,
    label_versions,
)
from runner.suite.yamlpos import Located, load_located, walk
from runner.uniforms import UNIFORM_FIELDS

# Refuse a shape before anything is allocated if one tensor would pass this.
MAX_TENSOR_BYTES = int(os.environ.get("REGRESS_MAX_TENSOR_MIB", "1024")) << 20
SCHEMA_PATH = Path(__file__).resolve().parents[1] / "schemas" / "suite.schema.json"
BUILTIN_DIMS = {"encoder": ("batch", "sequence")}
# What one builtin takes and the other does not (both: layers, hidden, heads, vocab, seed).
ENCODER_KEYS = frozenset({"style", "ffn", "eps", "activation", "max_positions"})
DECODER_KEYS = frozenset({"kv_heads", "intermediate", "max_length", "quantized", "generate"})


@lru_cache(maxsize=1)
def _validator() -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json.loads(SCHEMA_PATH.read_text()))


def discover(paths: Iterable[Path]) -> list[tuple[Path, bool]]:
    """Suite files named by `paths`, each with whether it was named itself: files as given,
    folders searched for *.yaml / *.yml."""
    found: dict[Path, tuple[Path, bool]] = {}  # by where it resolves: each file once
    for path in paths:
        if path.is_dir():
            for file in sorted(path.rglob("*")):
                if file.suffix in (".yaml", ".yml"):
                    found.setdefault(file.resolve(), (file, False))
        else:
            found[path.resolve()] = (path, True)
    return list(found.values())


def load_suites(
    paths: Iterable[Path], backends: Mapping[str, TargetParser], tags: Iterable[str] = ()
) -> list[Suite]:
    """Every suite under `paths`, its ``backends:`` entries parsed by `backends` (the registry's
    descriptors, by name). A folder yields its suites tagged `heavy` only if `tags` asks for
    them; a file named itself is loaded whatever its tags.

    Raises InvalidInput with the problems of all files together.
    """
    suites, problems = [], []
    wanted = set(tags)
    for path, named in discover(paths):
        try:
            suite = load_suite(path, backends)
        except InvalidInput as exc:
            problems += exc.problems
            continue
        if named or "heavy" not in suite.tags or "heavy" in wanted:
            suites.append(suite)
    if problems:
        raise InvalidInput(problems)
    return suites


def load_suite(path: Path, backends: Mapping[str, TargetParser]) -> Suite:
    if not path.is_file():
        raise InvalidInput(Problem(path, 1, 1, "no such suite file", "a YAML file"))
    located, yaml_problems = load_located(path)
    problems = [Problem(path, p.line, p.column, p.message, p.expected) for p in yaml_problems]
    if problems:
        raise InvalidInput(problems)
    if not isinstance(located.data, dict):
        raise InvalidInput(Problem(path, 1, 1, "suite is not a mapping", "keys such as models:"))
    problems = _schema_problems(located)
    if problems:
        raise InvalidInput(problems)
    return _Builder(located, backends).build()


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


def _schema_problems(located: Located) -> list[Problem]:
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


# A decoder's tensor: its elements, the key under the model entry that sizes it (where a refusal
# points), and what it is.
Tensor = tuple[int, tuple[str, ...], str]


def _tensor(key: tuple[str, ...], what: str, dims: dict[str, int]) -> Tensor:
    """A tensor of `dims`, each named as the suite names it, so a refusal says which to lower."""
    named = f"{' x '.join(dims)}: {' x '.join(map(str, dims.values()))}"
    return math.prod(dims.values()), key, f"{what} ({named})"


def _loop_tensors(params: DecoderParams, loop: GenerationLoop) -> list[Tensor]:
    """The largest tensors a generation loop allocates, whoever built the model (a decoder file's
    own weights are on disk already): a KV cache and the prefill's logits."""
    return [
        _tensor(
            ("max_length",),
            "a KV cache",
            {
                "kv_heads": params.kv_heads,
                "max_length": params.max_length,
                "head_size": params.head_size,
            },
        ),
        _tensor(
            ("generate", "prompt"),
            "the prefill's logits",
            {"prompt": loop.prompt, "vocab": params.vocab},
        ),
    ]


def _builtin_decoder_tensors(params: DecoderParams, loop: GenerationLoop) -> list[Tensor]:
    """The loop's largest tensors and the builtin decoder's: its weights, and the prefill's
    activations and attention scores (onnxruntime CPU's GroupQueryAttention holds them all)."""
    prefill = ("generate", "prompt")
    qkv = (params.heads + 2 * params.kv_heads) * params.head_size
    return _loop_tensors(params, loop) + [
        _tensor(
            ("vocab",),
            "its embedding and lm_head weights",
            {"vocab": params.vocab, "hidden": params.hidden},
        ),
        _tensor(
            ("hidden",),
            "its qkv_proj weights",
            {"hidden": params.hidden, "(heads + 2 kv_heads) * head_size": qkv},
        ),
        _tensor(
            ("intermediate",),
            "its MLP weights",
            {"hidden": params.hidden, "intermediate": params.intermediate},
        ),
        _tensor(
            prefill,
            "the prefill's MLP activations",
            {"prompt": loop.prompt, "intermediate": params.intermediate},
        ),
        _tensor(
            prefill,
            "the prefill's attention scores",
            {"heads": params.heads, "prompt": loop.prompt, "max_length": params.max_length},
        ),
    ]


def _largest_input(inputs: dict[str, list[int | str]], shape: dict[str, int]) -> int:
    """Elements of a model file's largest input (its intermediates are unknown before running)."""
    return max(
        (
            math.prod(shape.get(d, 1) if isinstance(d, str) else max(d, 1) for d in dims)
            for dims in inputs.values()
        ),
        default=0,
    )


class _Builder:
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
                label = spec.get("label") or "+".join(
                    part
                    for part in (",".join(order), ",".join(f"{k}={v:g}" for k, v in values))
                    if part
                )
                layouts.append((i, Layout(label, order, values)))
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
            params, dims = self.decoder_file(
                name, model_path, spec, path, inside=source and model_path.parent
            )
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
        loop = self.generation_loop(name, spec.get("generate", {}), params, path + ("generate",))
        for j, token in enumerate((loop.tokens or ()) if sized else ()):
            if token >= params.vocab:
                self.problem(
                    path + ("generate", "prompt", j),
                    f"token id {token} of model {name!r}'s prompt",
                    f"ids below its vocabulary ({params.vocab})",
                )
        tensors = _loop_tensors if model_path else _builtin_decoder_tensors
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

    def decoder_file(
        self, name: str, model_path: Path, spec: dict, path: tuple, inside: Path | None = None
    ) -> tuple[DecoderParams, dict[str, int] | None]:
        """An ONNX file declared as a decoder: the IO onnxruntime-genai's builder writes for a
        static KV cache, its sizes read from it, and its symbolic dims pinned to a decode step.
        With a problem, defaults (the problem stops the load)."""
        import onnx

        fallback = DecoderParams(static_mask=True), None
        read = self.model_file(model_path, path + ("package" if inside else "path",), inside)
        if read is None:
            return fallback
        inputs, outputs = read.inputs, read.outputs
        layers = 0
        while f"past_key_values.{layers}.key" in inputs:
            layers += 1
        caches = [f"{i}.{kv}" for i in range(layers) for kv in ("key", "value")]
        wanted_inputs = {"input_ids", "attention_mask", *(f"past_key_values.{c}" for c in caches)}
        wanted_outputs = {"logits", *(f"present.{c}" for c in caches)}
        if not layers or set(inputs) != wanted_inputs or not wanted_outputs <= set(outputs):
            self.problem(
                path + ("path",),
                f"model {name!r} ({model_path.name}) is declared a decoder (`generate:`), but "
                f"its inputs are {', '.join(inputs)} and its outputs {', '.join(outputs)}",
                "onnxruntime-genai's decoder: inputs input_ids, attention_mask and "
                "past_key_values.N.key and .value for each layer N; outputs logits and "
                "present.N.key and .value",
            )
            return fallback
        past, logits = inputs["past_key_values.0.key"], outputs["logits"]
        head_size = past[3] if len(past) == 4 else None
        if isinstance(head_size, str):  # the builder's `kv_cache_dim`: twice rotary's width
            head_size = read.rotary_head_size
        if len(past) != 4 or not isinstance(past[1], int) or head_size is None:
            self.problem(
                path + ("path",),
                f"model {name!r}: past_key_values.0.key has dims {past}",
                "[batch, kv_heads, length, head_size], kv_heads fixed, head_size fixed or "
                "GroupQueryAttention's cos_cache half as wide",
            )
            return fallback
        if not logits or not isinstance(logits[-1], int) or "max_length" not in spec:
            self.problem(
                path,
                f"model {name!r} (a decoder file): logits {logits}, max_length "
                f"{spec.get('max_length', 'not given')}",
                "logits whose last dim (the vocabulary) is fixed, and `max_length:` (the "
                "positions its KV-cache buffers hold)",
            )
            return fallback
        kv_heads, length = past[1], spec["max_length"]
        try:
            params = DecoderParams(
                layers=layers,
                hidden=kv_heads * head_size,  # only head_size = hidden / heads counts here
                heads=kv_heads,
                kv_heads=kv_heads,
                vocab=logits[-1],
                max_length=length,
                seed=spec.get("seed", 0),
                static_mask=True,
                cache_dtype=onnx.helper.tensor_dtype_to_np_dtype(
                    read.input_types["past_key_values.0.key"]
                ).name,
            )
        except ValueError as exc:
            self.problem(path, f"model {name!r}: {exc}", "sizes GroupQueryAttention takes")
            return fallback
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        pins = [(ids[0], 1), (ids[-1], 1), (mask[-1], length), (past[2], length)]
        pins.append((past[3], head_size))
        return params, {dim: value for dim, value in pins if isinstance(dim, str)}

    def generation_loop(
        self, name: str, spec: dict, params: DecoderParams, path: tuple
    ) -> GenerationLoop:
        """``generate:``, checked against the caches' length (the schema checks its keys)."""
        rewind = Rewind(**spec["rewind"]) if "rewind" in spec else None
        tokens = spec.get("prompt")
        if isinstance(tokens, list):  # a real prompt's ids, as the model's tokenizer wrote them
            spec = {**spec, "prompt": len(tokens), "tokens": tuple(tokens)}
        loop = GenerationLoop(**{**spec, "rewind": rewind})
        if rewind is not None:
            if rewind.after >= loop.steps:
                self.problem(
                    path + ("rewind", "after"),
                    f"a rewind after decode step {rewind.after} of {loop.steps}",
                    f"after < steps ({loop.steps}): a step must follow the rewind",
                )
            if rewind.by >= loop.prompt + rewind.after:
                self.problem(
                    path + ("rewind", "by"),
                    f"a rewind by {rewind.by} after decode step {rewind.after} leaves "
                    f"{loop.prompt + rewind.after - rewind.by} of the {loop.prompt} + "
                    f"{rewind.after} positions",
                    f"by < prompt + after ({loop.prompt + rewind.after}): at least one stays",
                )
            if loop.caches == "swapped":
                self.problem(
                    path + ("caches",),
                    "caches: swapped with a rewind: the swapped buffer's stale positions "
                    "would differ from the reference's",
                    "a rewind or swapped caches, in two models",
                )
        if loop.positions > params.max_length:
            rewound = " (the longest, with the rewind)" if rewind is not None else ""
            self.problem(
                path,
                f"a prompt of {loop.prompt} tokens and {loop.steps} decode steps need "
                f"{loop.positions} positions{rewound}; model {name!r} holds max_length "
                f"{params.max_length}",
                f"prompt + steps <= max_length ({params.max_length})",
            )
        return loop

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
