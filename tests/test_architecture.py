"""The layout docs/architecture.md and docs/backends.md ("Adding a backend") describe, checked
on the code: backend facts live in their descriptors, the schemas' vocabularies in one `$defs`
entry each, and the modules import one another without cycles."""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from runner.backends import REGISTRY
from runner.backends.base import RUN_STATUSES
from runner.matrix import Case
from runner.scenario.bundled import PAGE_MODULES
from runner.suite import load_suites
from runner.suite.spec import label_versions
from runner.verdicts import VERDICTS

from .conftest import REPO

RUNNER = REPO / "runner"
SCHEMAS = {name: json.loads((REPO / "schemas" / name).read_text()) for name in
           ("suite.schema.json", "result.schema.json")}  # fmt: skip


def _modules() -> dict[str, Path]:
    found = {}
    for path in RUNNER.rglob("*.py"):
        parts = path.relative_to(REPO).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(
    path: Path, name: str, known: set[str], type_checking: bool = False
) -> tuple[set[str], set[str]]:
    """Runner modules `path` imports when it loads, and those it imports inside functions
    (``if TYPE_CHECKING:`` blocks are neither, as they never run, unless `type_checking`: then
    their imports count as deferred)."""
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    at_load, deferred = set(), set()

    def targets(node) -> set[str]:
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                base = f"{base}.{node.module}" if node.module else base
            # `from package import module` needs the package started, not loaded
            names = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names
            ]
        return {n for n in names if n in known}

    def visit(node, in_function: bool) -> None:
        checking = isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        if checking and not type_checking:
            return
        if isinstance(node, ast.Import | ast.ImportFrom):
            (deferred if in_function else at_load).update(targets(node))
        nested = in_function or checking
        nested = nested or isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        for child in ast.iter_child_nodes(node):
            visit(child, nested)

    visit(tree, False)
    return at_load - {name}, deferred - {name}


@functools.cache  # every runner module parsed once for the tests here, which only read it
def _graph(type_checking: bool = False) -> dict[str, tuple[set[str], set[str]]]:
    modules = _modules()
    return {
        name: _imports(path, name, set(modules), type_checking) for name, path in modules.items()
    }


def _with_parents(graph, name: str) -> set[str]:
    """What loading `name` loads: its imports, and every package above each of them."""
    loaded = set()
    for target in graph[name][0]:
        parts = target.split(".")
        loaded.update(".".join(parts[:i]) for i in range(2, len(parts) + 1))
    return loaded - {name}


def _fail_on_a_cycle(edges: dict[str, set[str]]) -> None:
    state: dict[str, str] = {}

    def visit(name: str, path: list[str]) -> None:
        state[name] = "open"
        for target in sorted(edges[name]):
            if state.get(target) == "open":
                cycle = path[path.index(target) :] + [target]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if target not in state:
                visit(target, [*path, target])
        state[name] = "done"

    for name in sorted(edges):
        if name not in state:
            visit(name, [name])


def test_modules_import_one_another_without_cycles():
    # A submodule may import its package's other submodules while the package initializes:
    # only the modules an import statement names are edges, not the packages above them.
    _fail_on_a_cycle({name: at_load for name, (at_load, _) in _graph().items()})


def test_no_cycle_even_through_type_checking_or_function_level_imports():
    """The floors hold for readers and type checkers too: counting every import statement
    (annotations under TYPE_CHECKING, imports inside functions), no module reaches itself."""
    graph = _graph(type_checking=True)
    _fail_on_a_cycle({name: at_load | deferred for name, (at_load, deferred) in graph.items()})


def test_no_function_level_import_of_a_module_already_loaded():
    """A deferred import is for speed (pandas, Playwright, the pipeline), never for a module the
    importer loads anyway, which is how a deferred import hides a cycle."""
    graph = _graph()

    def loads(name: str, seen: set[str]) -> set[str]:
        for target in _with_parents(graph, name) - seen:
            seen.add(target)
            loads(target, seen)
        return seen

    for name, (_, deferred) in graph.items():
        needless = deferred & loads(name, set())
        assert not needless, f"{name} defers {needless}, which it loads anyway"


def test_backend_builds_and_element_types_are_spelled_only_in_backends():
    builds = {build for d in REGISTRY.values() for build in d.builds}
    assert builds == {"jsep", "webgpu", "jspi"}
    # onnxruntime-genai's model builder's own spelling of its target (`-e webgpu`), not a build
    elsewhere = {RUNNER / "packages.py": {"webgpu"}}
    for path in RUNNER.rglob("*.py"):
        if path.is_relative_to(RUNNER / "backends"):
            continue
        strings = {
            node.value
            for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        } - elsewhere.get(path, set())
        assert not strings & builds, f"{path} names builds {strings & builds}"


def test_importlib_resolves_in_one_place():
    users = [p for p in RUNNER.rglob("*.py") if "import_module" in p.read_text()]
    assert users == [RUNNER / "backends" / "base.py"]


def test_the_schemas_vocabularies_are_the_registry_and_the_verdicts():
    for name, schema in SCHEMAS.items():
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["$defs"]["verdict"]["enum"] == list(VERDICTS), name
    suite = SCHEMAS["suite.schema.json"]
    assert suite["$defs"]["backend_name"]["enum"] == list(REGISTRY)
    assert suite["$defs"]["bundle"]["enum"] == list(REGISTRY["ort-web"].builds)


def _enums(node, path="#"):
    """(path, values) of every enum in a schema."""
    if isinstance(node, dict):
        if "enum" in node:
            yield path, set(node["enum"])
        for key, value in node.items():
            yield from _enums(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _enums(value, f"{path}/{i}")


def test_each_vocabulary_is_listed_once():
    """Any other enum listing verdicts or backend names would drift from the `$defs` entry."""
    for name, schema in SCHEMAS.items():
        lists = [
            path
            for path, values in _enums(schema)
            if len(values & set(VERDICTS)) > 1 or len(values & set(REGISTRY)) > 1
        ]
        wanted = ["#/$defs/verdict"]
        if "backend_name" in schema["$defs"]:
            wanted.append("#/$defs/backend_name")
        assert sorted(lists) == sorted(wanted), name


def test_descriptors_say_what_other_steps_need():
    for name, descriptor in REGISTRY.items():
        assert descriptor.name == name and descriptor.summary and descriptor.runtime
        assert [t.id for t in label_versions(descriptor.targets({}, REPO)).values()] == (
            [f"{name}:{b}" for b in descriptor.builds] or [name]
        )


def _importers(graph, prefix: str) -> set[str]:
    """Modules outside `prefix` that import (at load or in a function) one inside it."""

    def inside(name: str) -> bool:
        return name == prefix or name.startswith(prefix + ".")

    return {
        name
        for name, (at_load, deferred) in graph.items()
        if not inside(name) and any(inside(t) for t in at_load | deferred)
    }


def test_the_report_and_repro_floors_point_down_only():
    """The report reads the history and lays it out: no backend (the Chromium timing tool is in
    runner/tools/, which no step imports); repro rebuilds a case without the report (new-case's
    snippet is runner/newcase.py, the result lookup is in history/)."""
    graph = _graph()
    for name, (at_load, deferred) in graph.items():
        imported = at_load | deferred
        if name.startswith("runner.report"):
            assert not {t for t in imported if t.startswith("runner.backends")}, name
        if name.startswith("runner.repro"):
            assert not {t for t in imported if t.startswith("runner.report")}, name
        if name.startswith("runner.history"):  # storage at the bottom: no backend either
            above = ("runner.report", "runner.repro", "runner.backends", "runner.step")
            assert not {t for t in imported if t.startswith(above)}, name
    assert _importers(graph, "runner.tools") == set()
    assert _importers(graph, "runner.reporters") == {"runner.cli"}


# Imports that point up the floors, each with why (docs/architecture.md: at most two).
UPWARD: dict[tuple[str, str], str] = {}


def _unit(module: str) -> str:
    """A module's room: its package under runner/, or the top-level module itself."""
    parts = module.split(".")
    package = ".".join(parts[:2])
    return package if (REPO / package.replace(".", "/")).is_dir() else module


def _unit_edges() -> set[tuple[str, str]]:
    """(room, room) for every import between two rooms, counting annotations under
    TYPE_CHECKING and imports inside functions."""
    return {
        (_unit(name), _unit(target))
        for name, (at_load, deferred) in _graph(type_checking=True).items()
        for target in at_load | deferred
        if _unit(name) != _unit(target) and name != "runner"
    }


def _documented_floors() -> list[set[str]]:
    """docs/architecture.md's floors, lowest first: the rooms each numbered item names."""
    text = (REPO / "docs" / "architecture.md").read_text()
    section = text.split("### The floors", 1)[1].split("\n#", 1)[0]
    items = [item.split("\n\n")[0] for item in re.split(r"\n\d+\. ", section)[1:]]
    names = [re.findall(r"`([\w/]+(?:\.py|/))`", item) for item in items]
    return [
        {"runner." + n.removesuffix(".py").strip("/").replace("/", ".") for n in floor}
        for floor in names
    ]


def test_the_documented_floors_are_the_imports():
    """Every room is on one floor of docs/architecture.md's list, and imports only from its own
    floor or below, but for the justified `UPWARD` arrows (at most two)."""
    floors = _documented_floors()
    rooms = {_unit(name) for name in _modules()} - {"runner"}
    listed = [room for floor in floors for room in floor]
    assert sorted(listed) == sorted(rooms), "each room listed once"
    floor_of = {room: i for i, floor in enumerate(floors) for room in floor}
    upward = {(a, b) for a, b in _unit_edges() if floor_of[b] > floor_of[a]}
    assert upward == set(UPWARD), "an import up the floors: move it down, or justify it"
    assert len(UPWARD) <= 2


def test_no_two_rooms_import_each_other_even_indirectly():
    """Packages and top-level modules form no loop (a loop makes every room on it one room)."""
    edges = _unit_edges()
    rooms = {room for edge in edges for room in edge}
    _fail_on_a_cycle({room: {b for a, b in edges if a == room} for room in rooms})


def test_loading_the_bundled_suites_starts_no_process_and_opens_no_connection(monkeypatch):
    """Loading reads files only (versions a registry must resolve wait for the selected cases):
    with processes and sockets forbidden, every bundled suite still loads."""

    def forbidden(*args, **kwargs):
        raise AssertionError(f"loading a suite reached out: {args[:1]}")

    monkeypatch.setattr(subprocess.Popen, "__init__", forbidden)
    monkeypatch.setattr(socket.socket, "connect", forbidden)
    suites = load_suites([REPO / "suites"], REGISTRY, tags=("heavy",))
    assert {s.path for s in suites} == {p.resolve() for p in (REPO / "suites").rglob("*.yaml")}


def test_the_command_line_parses_and_selection_selects():
    """`list`, `run` and `bisect` ask ``runner.selection`` for their cases: the command line
    expands, filters and shards nothing itself."""
    at_load, deferred = _graph()["runner.cli"]
    assert not {t for t in at_load | deferred if t == "runner.matrix"}
    names = {
        node.id if isinstance(node, ast.Name) else node.attr
        for node in ast.walk(ast.parse((RUNNER / "cli.py").read_text()))
        if isinstance(node, ast.Name | ast.Attribute)
    }
    assert not names & {"expand_matrix", "select_resolved", "shard_cases", "with_predecessors"}


def test_only_the_step_builds_evidence():
    """The judge sees one kind of evidence however a unit of work ran: the run, explore, repro's
    reruns and the benchmarks all step cases and scenarios through ``runner.step``; a
    scenario's sessions, which are no cases, have their runs' evidence built by
    ``runner.scenario.judging``, and a bundle, which holds no case, from its files by
    ``runner.scenario.bundled``."""
    builders = set()
    for path in [*RUNNER.rglob("*.py"), *(REPO / "bench").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                if name == "Evidence":
                    builders.add(path.relative_to(REPO).as_posix())
    assert builders == {
        "runner/step.py",
        "runner/scenario/bundled.py",
        "runner/scenario/judging.py",
    }


def test_backends_have_one_entry_point_and_the_step_alone_calls_it():
    """A backend runs a case or a scenario through ``run(work)``: it has no other public method
    named for running, and outside backends/ only the step (and localization's replays, and
    repro's rerun of a cut model's eager twin) hands one work."""
    for descriptor in REGISTRY.values():
        module, _, name = descriptor.factory.partition(":")
        tree = ast.parse((REPO / (module.replace(".", "/") + ".py")).read_text())
        (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name]
        public = {
            n.name for n in cls.body if isinstance(n, ast.FunctionDef) and n.name.startswith("run")
        }
        assert public == {"run"}, (descriptor.name, public)
    makers = {
        path.relative_to(REPO).as_posix()
        for path in RUNNER.rglob("*.py")
        if not path.is_relative_to(RUNNER / "backends")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("CaseWork", "ScenarioWork")
    }
    assert makers == {"runner/step.py", "runner/localize.py", "runner/repro/verify.py"}


def test_only_the_matrix_finds_where_a_layout_sequence_begins():
    """The matrix cuts cases into ``LayoutSequence``s; the step runs one as a whole and tells the
    backend where it opens and closes (``CaseWork``): no backend, and no other step, compares
    cases to find a sequence's boundary."""
    assert "sequence" not in {f.name for f in dataclasses.fields(Case)}
    assert not hasattr(Case, "sequence")
    readers = {
        path.relative_to(REPO).as_posix()
        for path in RUNNER.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Name) and node.id == "_sequence_key"
    }
    assert readers == {"runner/matrix.py"}
    for path in (RUNNER / "backends").rglob("*.py"):
        tree = ast.parse(path.read_text())
        attributes = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)}
        assert not attributes & {"sequence", "_sequence"}, path
    readers = set()  # the backends that keep a sequence's sessions or device
    for descriptor in REGISTRY.values():
        package = REPO / descriptor.factory.rpartition(".")[0].replace(".", "/")
        if any("work.opens_sequence" in path.read_text() for path in package.rglob("*.py")):
            readers.add(descriptor.name)
    # onnxruntime CPU and onnxruntime-genai make every case's session anew
    assert readers == set(REGISTRY) - {"reference", "ort-genai"}


def test_the_suite_loader_is_handed_the_backends_it_parses_entries_with():
    """Loading a suite reads files: it imports nothing from ``runner.backends`` (not even for
    annotations); a ``backends:`` entry is parsed by the descriptors its caller hands it, as
    onnx's backend test runner is handed its backend."""
    graph = _graph(type_checking=True)
    for name, (at_load, deferred) in graph.items():
        if name.startswith("runner.suite"):
            assert not {t for t in at_load | deferred if t.startswith("runner.backends")}, name


def _load_closure(graph, name: str) -> set[str]:
    """`name` and every runner module loading it loads, with the packages above each."""
    parts = name.split(".")
    seen = {".".join(parts[:i]) for i in range(1, len(parts) + 1)}
    for target in _with_parents(graph, name):
        if target not in seen:
            seen |= _load_closure(graph, target)
    return seen


def test_the_bundle_page_loads_exactly_the_judge_and_what_it_imports():
    """The page writes `PAGE_MODULES` into Pyodide; a module the judge comes to import must be
    listed there, or every bundle page fails to judge."""
    closure = _load_closure(_graph(), "runner.scenario.bundled")
    paths = {str(_modules()[name].relative_to(REPO)) for name in closure}
    assert paths == set(PAGE_MODULES)


def test_the_judge_runs_without_numpy():
    """Pyodide's core has no numpy: the judge and the bundle's entry must load without it, and
    judge through the measure they are given."""
    script = (
        "import sys; sys.modules['numpy'] = None\n"
        "from runner.scenario.bundled import ScriptMeasure, judge_page\n"
        "import json\n"
        "tensors = [{'y': [1.0, 2.0]}, {'y': [1.0, 2.5]}]\n"
        "def compare(a, b, abs, rel, exact):\n"
        "    errors = [abs_ for abs_ in (max(map(lambda p: __builtins__.abs(p[0] - p[1]),"
        " zip(tensors[a]['y'], tensors[b]['y']))),)]\n"
        "    bad = errors[0] > abs\n"
        "    return json.dumps({'y': {'maxAbs': errors[0], 'maxRel': 0.2, "
        "'mismatched': int(bad), 'total': 2, 'shapes': None, 'nonFinite': 0}})\n"
        "manifest = {'judge': {'step': 0, 'eager': None}, 'tolerance': {'abs': 1e-3, 'rel': 0},"
        " 'steps': [{'workload': 'main', 'mode': 'eager', 'graphs': 1, 'reuse': None}],"
        " 'workloads': {'main': {'layout': 'default', 'variants': [{'graph': 0, 'draw': 0}],"
        " 'schedule': [[0, 0]]}}}\n"
        "results = [{'status': 'ok', 'runs': [1]}]\n"
        "print(judge_page(json.dumps(manifest), json.dumps(results), json.dumps({'main': [0]}),"
        " compare, lambda a, b: None))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, check=True
    )
    page = json.loads(done.stdout)
    assert page["verdict"] == "reference-mismatch", page
    assert page["lines"][-1] == "FAIL: reference-mismatch"
    assert (
        "eager output differs from onnxruntime CPU on 'y': 1/2 elements, max abs 0.5"
        in (page["message"])
    )


def _strings(path: Path) -> set[str]:
    if path.suffix != ".py":
        return set(re.findall(r"""['"`]([a-z-]+)['"`]""", path.read_text()))
    return {
        node.value
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def test_verdicts_are_decided_in_the_judge_only():
    """A new detector is written once, in runner/judge.py: no other module makes a `Finding`,
    and no bundle runner (repro.py, the page, the bundle's judging entry) names a verdict a
    detector decides, which is what a second judge would have to do."""
    makers = {
        path
        for path in RUNNER.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("Finding")
    }
    assert makers == {RUNNER / "judge.py"}
    detected = set(VERDICTS) - set(RUN_STATUSES) - {"pass"}
    runners = [
        RUNNER / "scenario" / "bundled.py",
        *RUNNER.glob("backends/*/repro_script.py"),
        *RUNNER.glob("backends/*/assets/repro.mjs"),
        *RUNNER.glob("backends/*/assets/scenario.mjs"),  # a scenario bundle's step loop
        *RUNNER.glob("backends/*/assets/feeds.mjs"),  # a bundle's feeds, as the suite's page's
    ]
    assert len(runners) == 5
    for path in runners:
        assert not _strings(path) & detected, f"{path} names {_strings(path) & detected}"
