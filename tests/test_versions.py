"""onnxruntime-web versions as a matrix axis, without a browser: version order, what a suite's
`version:` names, case ids, the cache, and bad input. npm's answer comes from a registry file
seeded into a temporary cache folder with npm pointed at a closed port (the offline fallback);
tests/test_versions_browser.py installs and runs real versions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runner.backends import REGISTRY
from runner.backends.base import VersionProblem
from runner.backends.ortweb import versions
from runner.backends.ortweb.package import (
    BUILDS,
    OrtWebPackage,
    lacks,
    layout_of,
    pinned_version,
)
from runner.history import CaseResult, RunRecord
from runner.matrix import unversioned_id
from runner.report import analysis
from runner.report.build import build_report
from runner.report.history import History
from runner.report.render import render_page
from runner.selection import Selection, plan_run
from runner.suite import load_suite

from .conftest import case_result, regress

# As npm listed them on 2026-11-30, in npm's own order: dev builds published out of order.
PUBLISHED = [
    "1.22.0",
    "1.23.0",
    "1.24.3",
    "1.25.0-dev.20260209-a3749f1353",
    "1.25.0-dev.20260228-6e72d31970",
    "1.25.1",
    "1.26.0-dev.20260410-5e55544225",
    "1.26.0",
    "1.27.0",
    "1.29.0",
    "1.30.0",
    "1.31.0-dev.20260914-8d85527a0",
    "1.25.0-dev.20260212-1a71a5f46e",
]
CLOSED_REGISTRY = {"npm_config_registry": "http://127.0.0.1:9/", "npm_config_fetch_retries": "0"}


@pytest.fixture
def offline_cache(tmp_path, monkeypatch) -> Path:
    """A cache folder holding npm's answer of an earlier day; npm itself cannot reach a registry."""
    cache = tmp_path / "cache"
    record = {"versions": PUBLISHED, "tags": {"latest": "1.30.0"}, "fetched": "2026-11-30T00:00Z"}
    (cache / "onnxruntime-web").mkdir(parents=True)
    (cache / "onnxruntime-web" / "registry.json").write_text(json.dumps(record))
    monkeypatch.setenv("REGRESS_CACHE_DIR", str(cache))
    for key, value in CLOSED_REGISTRY.items():
        monkeypatch.setenv(key, value)
    versions.registry.cache_clear()
    yield cache
    versions.registry.cache_clear()


def test_version_order_puts_dev_builds_before_their_release():
    ordered = sorted(PUBLISHED, key=versions.version_key)
    assert ordered[3:8] == [
        "1.25.0-dev.20260209-a3749f1353",
        "1.25.0-dev.20260212-1a71a5f46e",
        "1.25.0-dev.20260228-6e72d31970",
        "1.25.1",
        "1.26.0-dev.20260410-5e55544225",
    ]
    assert ordered[-2:] == ["1.30.0", "1.31.0-dev.20260914-8d85527a0"]
    assert versions.version_key("1.9.0") < versions.version_key("1.10.0")


def test_dev_builds_name_their_commit_and_releases_their_tag():
    assert versions.commit_of("1.31.0-dev.20260914-8d85527a0") == "8d85527a0"
    assert versions.commit_of("1.30.0") is None
    assert versions.compare_url("1.24.3", "1.25.0-dev.20260209-a3749f1353") == (
        "https://github.com/microsoft/onnxruntime/compare/v1.24.3...a3749f1353"
    )


def test_what_a_declared_version_names(offline_cache, tmp_path):
    base = tmp_path
    latest = versions.resolve("latest", base)
    assert (latest.exact, latest.label) == ("1.30.0", "latest")
    assert "npm being unreachable now" in latest.note  # the cached answer, and it says so
    dev = versions.resolve("dev", base)  # no `dev` tag: the newest dev build
    assert (dev.exact, dev.label) == ("1.31.0-dev.20260914-8d85527a0", "dev")
    assert versions.resolve("1.24.3", base).exact == "1.24.3"
    assert versions.resolve(None, base).exact == pinned_version()
    with pytest.raises(
        versions.VersionProblem,
        match=r"1\.24\.9 is not published \(nearest: "
        r"1\.23\.0, 1\.24\.3, 1\.25\.0-dev\.20260209",
    ):
        versions.resolve("1.24.9", base)
    registry = versions.registry()
    assert registry.between("1.24.3", "1.25.1") == [
        "1.24.3",
        "1.25.0-dev.20260209-a3749f1353",
        "1.25.0-dev.20260212-1a71a5f46e",
        "1.25.0-dev.20260228-6e72d31970",
        "1.25.1",
    ]


def test_a_local_build_folder(tmp_path):
    build = tmp_path / "js" / "web"
    (build / "dist").mkdir(parents=True)
    (build / "package.json").write_text(json.dumps({"name": "onnxruntime-web", "version": "9.9.9"}))
    assert OrtWebPackage(build, "file:x").layout_problem() == (
        "onnxruntime-web file:x ships no WebGPU EP (no ort.webgpu.* or *.jsep.wasm in its dist/; "
        "the first release with one is 1.15.0)"
    )
    with pytest.raises(
        VersionProblem, match=r"holds no onnxruntime-web build.*jsep: dist/\*\.jsep\.wasm"
    ):
        versions.resolve("js/web", tmp_path)
    for name in ("ort.webgpu.mjs", "ort-wasm-simd-threaded.asyncify.wasm"):
        (build / "dist" / name).write_bytes(b"")
    local = versions.resolve("./js/web", tmp_path)
    assert (local.exact, local.label) == (f"file:{build}", "local")
    package = OrtWebPackage(build, local.exact)
    assert package.builds() == {"jsep": "dist/ort.mjs", "webgpu": "", "jspi": "dist/ort.jspi.mjs"}
    assert package.package_version == "9.9.9"


# dist/ listings as npm published them (top-level files; sourcemaps, typings and the rarer
# bundles left out), one per layout and the lines either side of each boundary
DISTS = {
    "1.14.0": "ort-wasm-simd.wasm ort-wasm.wasm ort.min.js ort.webgl.min.js ort.wasm.min.js",
    "1.16.3": "ort-wasm-simd.jsep.wasm ort-wasm-simd-threaded.jsep.wasm ort-wasm-simd.wasm "
    "ort.min.js ort.webgpu.min.js",
    "1.18.0": "ort-wasm-simd.jsep.wasm ort-wasm-simd.wasm ort.all.min.js ort.min.js "
    "ort.webgpu.min.js",
    "1.20.1": "ort-wasm-simd-threaded.jsep.mjs ort-wasm-simd-threaded.jsep.wasm "
    "ort-wasm-simd-threaded.mjs ort-wasm-simd-threaded.wasm ort.min.mjs ort.mjs ort.webgpu.min.js "
    "ort.webgpu.min.mjs ort.webgpu.mjs",
    "1.22.0": "ort-wasm-simd-threaded.jsep.mjs ort-wasm-simd-threaded.jsep.wasm ort.mjs "
    "ort.webgpu.min.js ort.webgpu.mjs",
    "1.23.0": "ort-wasm-simd-threaded.asyncify.mjs ort-wasm-simd-threaded.asyncify.wasm "
    "ort-wasm-simd-threaded.jsep.mjs ort-wasm-simd-threaded.jsep.wasm ort.mjs ort.webgpu.min.js "
    "ort.webgpu.mjs",
    "1.24.3": "ort-wasm-simd-threaded.asyncify.wasm ort-wasm-simd-threaded.jsep.wasm "
    "ort-wasm-simd-threaded.jspi.wasm ort.jspi.mjs ort.mjs ort.webgpu.min.js ort.webgpu.mjs",
}


@pytest.mark.parametrize(
    ("version", "modules"),
    [
        ("1.14.0", {}),
        ("1.16.3", {"jsep": "ort.webgpu.min.js"}),  # a UMD script
        ("1.18.0", {"jsep": "ort.webgpu.min.js"}),
        ("1.20.1", {"jsep": "ort.webgpu.mjs"}),  # its ort.mjs has no WebGPU
        ("1.22.0", {"jsep": "ort.webgpu.mjs"}),
        ("1.23.0", {"jsep": "ort.mjs", "webgpu": "ort.webgpu.mjs"}),
        ("1.24.3", {"jsep": "ort.mjs", "webgpu": "ort.webgpu.mjs", "jspi": "ort.jspi.mjs"}),
    ],
)
def test_which_file_is_each_builds_module(version, modules):
    names = DISTS[version].split()
    layout = layout_of(names)
    assert {b: layout.modules[b] for b in BUILDS if not lacks(b, names)} == modules
    if not modules:
        assert layout is None


def test_what_a_dist_lacks_of_a_build():
    assert lacks("jspi", DISTS["1.23.0"].split()) == "ort.jspi.mjs"  # its layout names it
    assert lacks("webgpu", DISTS["1.22.0"].split()) == "*.asyncify.wasm"  # JSEP-only lines
    assert lacks("jsep", DISTS["1.14.0"].split()) == "*.jsep.wasm"
    assert lacks("jsep", ["ort.webgpu.min.js"]) == "*.jsep.wasm"  # the module without its wasm


def test_the_opsets_old_versions_take():
    assert [versions.max_opset(v) for v in ("1.15.0", "1.15.1", "1.16.3", "1.17.0", "1.30.0")] == [
        18,
        18,
        19,
        None,
        None,
    ]


def test_ids_carry_the_version_only_when_several_are_in_play(offline_cache, write_suite):
    one = write_suite(SUITE.format(version="'1.24.3'"), "one.yaml")
    assert [b.id for b in load_suite(one, REGISTRY).backends] == ["ort-web:webgpu"]
    # loading reads files only: npm is asked when the cases run or are listed
    assert (
        load_suite(one, REGISTRY).backends[0].version,
        load_suite(one, REGISTRY).backends[0].declared,
    ) == (
        None,
        "1.24.3",
    )
    several = write_suite(SUITE.format(version="['1.24.3', latest, dev]"), "several.yaml")
    assert [b.id for b in load_suite(several, REGISTRY).backends] == [
        "ort-web@1.24.3:webgpu",
        "ort-web@latest:webgpu",
        "ort-web@dev:webgpu",
    ]
    listed = regress("list", several, "--filter", "version=1.2*", "--filter", "capture=capture")
    assert listed.stdout.splitlines() == [
        "enc/batch=1,sequence=4/layout=default/ort-web@1.24.3:webgpu/capture"
    ]
    overridden = regress("list", one, "--ort-web-version", "1.29.0", "--ort-web-version", "dev")
    assert [line.split("/")[-2] for line in overridden.stdout.splitlines()] == [
        "ort-web@1.29.0:webgpu",
        "ort-web@1.29.0:webgpu",
        "ort-web@dev:webgpu",
        "ort-web@dev:webgpu",
    ]


def test_a_scenario_on_several_versions_has_an_id_on_each(offline_cache, write_suite):
    """A scenario's own `backends:` naming two versions: each id names its version, as a case's
    does, and none of them is the other's."""
    scenario = """
scenarios:
  - name: twice
    model: enc
    backends: [{name: ort-web, version: ['1.24.3', pinned], bundle: webgpu}]
    sessions: {s: {}}
    steps: [{run: s}, {run: s}]
"""
    path = write_suite(SUITE.format(version="'1.24.3'") + scenario)
    assert [item.id for item in plan_run(Selection((path,))).scenarios] == [
        "scenario=twice/ort-web@1.24.3:webgpu",
        "scenario=twice/ort-web@pinned:webgpu",
    ]


def test_include_and_exclude_name_builds_on_every_version(offline_cache, write_suite):
    suite = write_suite(
        SUITE.format(version="['1.24.3', '1.30.0']").replace(
            "bundle: webgpu", "bundle: [jsep, webgpu]"
        )
        + "exclude:\n  - {backend: 'ort-web:jsep'}\n  - {backend: 'ort-web@1.24.3', "
        "capture: eager}\n"
    )
    listed = regress("list", suite).stdout.splitlines()
    assert [line.split("/", 3)[3] for line in listed] == [
        "ort-web@1.24.3:webgpu/capture",
        "ort-web@1.30.0:webgpu/eager",
        "ort-web@1.30.0:webgpu/capture",
    ]


def test_a_rule_for_a_build_holds_on_every_version(offline_cache, write_suite):
    suite = write_suite(
        SUITE.format(version="['1.24.3', '1.30.0']")
        + "cases:\n  - match: {backend: 'ort-web:webgpu', version: '1.24.*'}\n"
        "    expect: capture-unsupported\n"
    )
    listed = regress("list", suite, "--filter", "capture=capture").stdout.splitlines()
    assert listed == [
        "enc/batch=1,sequence=4/layout=default/ort-web@1.24.3:webgpu/capture  "
        "expect capture-unsupported",
        "enc/batch=1,sequence=4/layout=default/ort-web@1.30.0:webgpu/capture",
    ]


def test_bad_versions_are_located_invalid_input(offline_cache, write_suite):
    suite = write_suite(SUITE.format(version="['1.24.3', '1.30', ./nowhere]"))
    proc = regress("validate", suite)  # what files alone can tell
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert lines[0] == (
        f"{suite}:6:41: '1.30' is not an onnxruntime-web version; expected a published "
        "version (quoted: '1.24.3'), an npm dist-tag (latest), dev, pinned, or a folder holding "
        "an onnxruntime-web build"
    )
    assert lines[1].startswith(f"{suite}:6:49: {suite.parent / 'nowhere'} has no package.json")
    assert "Traceback" not in proc.stderr
    unpublished = write_suite(SUITE.format(version="['1.24.3', '1.24.9']"), "unpublished.yaml")
    validated = regress("validate", unpublished)
    assert validated.returncode == 0, validated.stderr
    assert f"{unpublished}:6:41: ort-web version '1.24.9' was not checked" in validated.stderr
    listed = regress("list", unpublished)  # npm's answer (here, its last one) says
    assert listed.returncode == 2, listed.stderr
    [line] = listed.stderr.splitlines()
    assert line.startswith(f"{unpublished}:6:41: onnxruntime-web 1.24.9 is not published (nearest:")
    assert "expected a published version, a dist-tag (latest), dev, pinned, or a folder" in line


def test_npm_unreachable_and_nothing_cached_is_exit_3_when_asked(tmp_path, write_suite):
    suite = write_suite(SUITE.format(version="'1.24.3'"))
    env = {"REGRESS_CACHE_DIR": str(tmp_path / "empty"), **CLOSED_REGISTRY}
    validated = regress("validate", suite, env=env, process=True)
    assert validated.returncode == 0, validated.stderr
    proc = regress("list", suite, env=env, process=True)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.startswith(
        "environment unusable: npm view onnxruntime-web failed: npm error"
    )
    assert "Traceback" not in proc.stderr


def test_a_cached_version_needs_no_network(tmp_path, write_suite):
    cache = tmp_path / "cache"
    (cache / "onnxruntime-web" / "1.24.3").mkdir(parents=True)
    (cache / "onnxruntime-web" / "1.24.3" / ".complete").touch()
    suite = write_suite(SUITE.format(version="'1.24.3'"))
    proc = regress(
        "list", suite, env={"REGRESS_CACHE_DIR": str(cache), **CLOSED_REGISTRY}, process=True
    )
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 2


def test_bisect_reads_case_ids_with_or_without_a_version():
    base = "enc/batch=1,sequence=4/layout=default"
    versioned = f"{base}/ort-web@1.24.3:webgpu/capture"
    assert unversioned_id(versioned) == f"{base}/ort-web:webgpu/capture"
    op = "m/f.jsonc/t/c"
    assert unversioned_id(f"{op}/ort-web@dev:jsep/eager") == f"{op}/ort-web:jsep/eager"
    assert unversioned_id(f"{base}/wgpu/capture-revisit") == f"{base}/wgpu/capture-revisit"


def test_bisect_refuses_what_it_cannot_do(offline_cache, write_suite):
    suite = write_suite(SUITE.format(version="'1.24.3'"))
    case = "enc/batch=1,sequence=4/layout=default/ort-web:webgpu/capture"
    newer_first = regress("bisect", case, suite, "--good", "1.30.0", "--bad", "1.24.3")
    assert (
        newer_first.returncode == 2 and "must be an older published version" in newer_first.stderr
    )
    unknown = regress(
        "bisect",
        "nope/static/layout=default/ort-web:webgpu/capture",
        suite,
        "--good",
        "1.24.3",
        "--bad",
        "1.30.0",
    )
    assert unknown.returncode == 2 and "no case 'nope/" in unknown.stderr
    wgpu = write_suite(
        SUITE.format(version="x").replace("{name: ort-web, version: x, bundle: webgpu}", "wgpu"),
        "wgpu.yaml",
    )
    wgpu_case = "enc/batch=1,sequence=4/layout=default/wgpu/capture"
    no_versions = regress("bisect", wgpu_case, wgpu, "--good", "1.24.3", "--bad", "1.30.0")
    assert no_versions.returncode == 2 and "wgpu has no versions" in no_versions.stderr


def test_the_backends_with_versions_are_ort_web_and_ort_native():
    versioned = [name for name, d in REGISTRY.items() if d.versions]
    assert versioned == ["ort-web", "ort-native"]
    assert all(REGISTRY[name].version_history for name in versioned)


SUITE = """
name: versions
models:
  enc: {{builtin: encoder, layers: 1, hidden: 8, heads: 2, ffn: 16}}
shapes: [{{batch: 1, sequence: 4}}]
backends:
  - {{name: ort-web, version: {version}, bundle: webgpu}}
"""


def _result(version: str, label: str, mode: str, verdict: str) -> CaseResult:
    backend = f"ort-web@{label}:webgpu"
    return case_result(
        result_id=f"{label}-{mode}",
        case_id=f"bert/static/layout=default/{backend}/{mode}",
        model="bert",
        backend=backend,
        bundle="webgpu",
        version=version,
        capture=mode,
        verdict=verdict,
    )


def test_the_report_shows_cases_by_version_and_what_changed():
    results = [
        _result("1.24.3", "1.24.3", "eager", "pass"),
        _result("1.24.3", "1.24.3", "capture", "capture-unsupported"),
        _result("1.30.0", "1.30.0", "eager", "pass"),
        _result("1.30.0", "1.30.0", "capture", "pass"),
        _result("1.31.0-dev.20260914-8d85527a0", "dev", "eager", "pass"),
        _result("1.31.0-dev.20260914-8d85527a0", "dev", "capture", "capture-mismatch"),
    ]
    history = History.of([RunRecord("R", "2026-11-30T10:00:00+00:00")], results)
    grid = analysis.version_grid(history.results)
    assert list(grid["verdict"].columns) == ["1.24.3", "1.30.0", "1.31.0-dev.20260914-8d85527a0"]
    capture = "bert/static/layout=default/ort-web:webgpu/capture"
    assert grid.loc[capture, "verdict"].tolist() == [
        "capture-unsupported",
        "pass",
        "capture-mismatch",
    ]
    changes = analysis.version_changes(grid).to_dict("records")
    assert changes == [
        {
            "case": capture,
            "from": "1.24.3",
            "to": "1.30.0",
            "before": "capture-unsupported",
            "after": "pass",
        },
        {
            "case": capture,
            "from": "1.30.0",
            "to": "1.31.0-dev.20260914-8d85527a0",
            "before": "pass",
            "after": "capture-mismatch",
        },
    ]
    page, _ = render_page(build_report(history, "2026-11-30T11:00:00+00:00"))
    assert '<section id="versions">' in page and '<a href="#versions">' in page
    assert "dev<br>" in page and "Changed between versions" in page
    single = History.of([RunRecord("R", "2026-11-30T10:00:00+00:00")], results[2:4])
    assert analysis.version_grid(single.results).empty
    assert 'id="versions"' not in render_page(build_report(single, "2026-11-30T11:00:00+00:00"))[0]
