"""Matrix expansion: counts, order, include/exclude, filters and shards."""

from __future__ import annotations

import pytest

from runner.backends import REGISTRY
from runner.matrix import (
    expand_matrix,
    layout_sequences,
    parse_shard,
    select_cases,
    shard_cases,
    with_predecessors,
)
from runner.skips import skip_reason
from runner.suite import load_suite
from runner.verdicts import SKIP_OPTION

from .conftest import regress

SUITE = """
models:
  a: {builtin: encoder}
  b: {builtin: encoder, style: exported, heads: 2}
shapes:
  - {batch: 1, sequence: 8}
  - {batch: 2, sequence: 8}
layouts:
  - permute: [eps, heads]
  - label: small-eps
    values: {eps: 1.0e-3}
backends: [wgpu, ort-web]
"""


@pytest.fixture
def suite(write_suite):
    return load_suite(write_suite(SUITE), REGISTRY)


def test_counts_and_ids(suite):
    cases = expand_matrix([suite])
    # 2 models x 2 shapes x 4 backends (wgpu + 3 ort-web builds) x (3 layouts x 2 modes
    # + the first layout captured again at the end of the sequence)
    assert len(cases) == 2 * 2 * 4 * (3 * 2 + 1)
    assert len({case.id for case in cases}) == len(cases)
    assert cases[0].id == "a/batch=1,sequence=8/layout=eps,heads/ort-web:jsep/eager"
    assert cases[1].id == "a/batch=1,sequence=8/layout=eps,heads/ort-web:jsep/capture"
    assert cases[2].id == "a/batch=1,sequence=8/layout=heads,eps/ort-web:jsep/eager"


def _cell(case):
    return case.model.name, case.shape.label, case.backend.id


def test_order_keeps_layout_sequences_contiguous(suite):
    cases = expand_matrix([suite])
    sequences = layout_sequences(cases)
    assert [case for sequence in sequences for case in sequence.cases] == cases
    assert all(len({_cell(c) for c in s.cases}) == 1 for s in sequences)
    assert len({_cell(s.cases[0]) for s in sequences}) == len(sequences), "a sequence was split"
    assert len(sequences) == 2 * 2 * 4
    assert expand_matrix([suite]) == cases  # deterministic


def test_sequences_return_to_their_first_layout(suite):
    cases = layout_sequences(expand_matrix([suite]))[0].cases
    assert [c.id.split("/", 2)[2] for c in cases] == [
        "layout=eps,heads/ort-web:jsep/eager",
        "layout=eps,heads/ort-web:jsep/capture",
        "layout=heads,eps/ort-web:jsep/eager",
        "layout=heads,eps/ort-web:jsep/capture",
        "layout=small-eps/ort-web:jsep/eager",
        "layout=small-eps/ort-web:jsep/capture",
        "layout=eps,heads/ort-web:jsep/capture-revisit",
    ]
    assert cases[-1].revisit and cases[-1].cell == cases[0].cell
    # the case whose session the revisit comes back to, and only that one, says so
    assert [c.revisited for c in cases] == [False, True, False, False, False, False, False]


def test_a_sequence_of_one_layout_has_no_revisit_and_nothing_revisited(write_suite):
    one_layout = SUITE.replace("  - label: small-eps\n    values: {eps: 1.0e-3}\n", "")
    one_layout = one_layout.replace("permute: [eps, heads]", "label: default")
    cases = expand_matrix([load_suite(write_suite(one_layout), REGISTRY)])
    assert len(cases) == 2 * 2 * 4 * 2
    assert not any(c.revisit or c.revisited for c in cases)


def test_a_preferred_layout_is_skipped_only_where_sessions_take_no_such_option(write_suite):
    two = SUITE.replace("permute: [eps, heads]", "preferred_layout: NCHW")
    cases = expand_matrix([load_suite(write_suite(two), REGISTRY)])
    reasons = {(c.backend.name, c.layout.label): skip_reason(c) for c in cases}
    assert reasons[("wgpu", "NCHW")] == (
        f"{SKIP_OPTION}: wgpu's sessions have no preferredLayout (layout NCHW asks for NCHW)"
    )
    assert reasons[("ort-web", "NCHW")] is None and reasons[("wgpu", "small-eps")] is None


def test_exclude_and_include(write_suite):
    suite = load_suite(
        write_suite(
            SUITE
            + """
exclude:
  - {backend: ort-web, capture: eager}
  - {model: b, shape: {batch: 2}}
include:
  - {model: a, backend: wgpu, tolerance: {abs: 0.5}}
  - {model: b, shape: {batch: 4, sequence: 8}, backend: wgpu, layout: small-eps, capture: capture}
"""
        ),
        REGISTRY,
    )
    cases = expand_matrix([suite])
    ids = {case.id for case in cases}
    assert not any("ort-web" in i and i.endswith("/eager") for i in ids)
    assert not any(i.startswith("b/batch=2,") for i in ids)
    assert "b/batch=4,sequence=8/layout=small-eps/wgpu/capture" in ids
    # a: 2 shapes x (wgpu 3x2+1 + ort-web 3 builds x (3 layouts x capture only + 1)) = 2 x 19
    # b: 1 shape x 19, plus the included one
    assert len(cases) == 38 + 19 + 1
    widened = [c for c in cases if c.model.name == "a" and c.backend.id == "wgpu"]
    assert widened and all(c.tolerance.abs == 0.5 for c in widened)
    assert all(c.tolerance.abs == 1e-3 for c in cases if c not in widened)


def test_case_rules_attach_expectations(write_suite):
    suite = load_suite(
        write_suite(
            SUITE
            + """
cases:
  - match: {layout: small-eps, capture: capture, backend: "ort-web:*"}
    bug: microsoft/onnxruntime#29594
    expect: [stale-layout, capture-mismatch]
    reason: replay keeps the first layout's eps
    tolerance: {abs: 0.01, rel: 0.0}
"""
        ),
        REGISTRY,
    )
    cases = expand_matrix([suite])
    marked = [c for c in cases if c.expectation.bug]
    assert len(marked) == 2 * 2 * 3  # models x shapes x builds (revisits are of another layout)
    assert all(c.expectation.expect == {"stale-layout", "capture-mismatch"} for c in marked)
    assert all(c.tolerance.abs == 0.01 for c in marked)
    assert all(c.expectation.expect == {"pass"} for c in cases if c not in marked)


def test_filters(suite):
    cases = expand_matrix([suite])
    assert len(select_cases(cases, ["backend=wgpu"])) == 28
    assert len(select_cases(cases, ["capture=capture", "model=b"])) == 32  # revisits included
    assert len(select_cases(cases, ["*/capture-revisit"])) == 16
    assert len(select_cases(cases, ["*/layout=small-eps/*"])) == 32
    assert len(select_cases(cases, ["small-eps"])) == 32  # a bare word matches inside ids
    assert len(select_cases(cases, ["bundle=js*"])) == 2 * 2 * 2 * 7
    assert select_cases(cases, ["model=nope"]) == []


@pytest.mark.parametrize("total", [1, 2, 3, 5, 7])
def test_shards_cover_every_case_exactly_once(suite, total):
    cases = expand_matrix([suite])
    shards = [shard_cases(cases, i, total) for i in range(1, total + 1)]
    flat = [case.id for shard in shards for case in shard]
    assert sorted(flat) == sorted(case.id for case in cases)
    assert len(flat) == len(set(flat))
    for shard in shards:  # sequences are never split
        for case in shard:
            assert all(c in shard for c in cases if _cell(c) == _cell(case))
    if total <= 2:
        assert all(shards), "a shard came out empty"


@pytest.mark.parametrize("text", ["0/2", "3/2", "1", "a/b", "1/0"])
def test_bad_shard(text):
    with pytest.raises(ValueError, match="--shard"):
        parse_shard(text)


def test_failed_cases_come_back_with_what_runs_before_them(suite):
    cases = expand_matrix([suite])
    sequences = layout_sequences(cases)
    first, other = list(sequences[0].cases), list(sequences[-1].cases)
    wanted = {first[3].id, first[1].id, other[0].id, "gone/from/the/suite"}
    assert with_predecessors(cases, wanted) == first[:4] + other[:1]
    assert with_predecessors(cases, set()) == []


MODES_SUITE = """
buffers: {outputs: rewrite}
models:
  a: {builtin: encoder}
  b: {builtin: encoder, buffers: {inputs: fresh}, graphs: 2}
shapes:
  - {batch: 1, sequence: 8}
backends: [wgpu]
capture: [capture, dynamic, eager]
cases:
  - match: {model: a, capture: capture}
    buffers: {outputs: fresh}
    graphs: 3
"""


def test_modes_run_dynamic_eager_capture_and_buffer_modes_resolve(write_suite):
    cases = expand_matrix([load_suite(write_suite(MODES_SUITE), REGISTRY)])
    assert [c.id.rsplit("/", 1)[1] for c in cases] == ["dynamic", "eager", "capture"] * 2
    modes = {(c.model.name, c.mode): (c.buffers.label, c.graphs) for c in cases}
    assert modes == {
        ("a", "dynamic"): ("rewrite/rewrite", 1),  # the suite's
        ("a", "eager"): ("rewrite/rewrite", 1),
        ("a", "capture"): ("rewrite/fresh", 3),  # a rule sets outputs alone, and graphs
        ("b", "dynamic"): ("fresh/rewrite", 2),  # the model's inputs, the suite's outputs
        ("b", "eager"): ("fresh/rewrite", 2),
        ("b", "capture"): ("fresh/rewrite", 2),
    }
    assert cases[0].dynamic and not cases[0].capture and cases[0].fields()["capture"] == "dynamic"
    fresh = select_cases(cases, ["buffers=fresh/*"])
    assert [c.id for c in fresh] == [
        f"b/batch=1,sequence=8/layout=default/wgpu/{mode}"
        for mode in ("dynamic", "eager", "capture")
    ]
    assert len(select_cases(cases, ["graphs=3"])) == 1
    assert len(select_cases(cases, ["capture=dynamic"])) == 2


RETARGETED = """
name: retargeted
models:
  enc: {builtin: encoder, layers: 1, hidden: 8, heads: 2, ffn: 16}
shapes: [{batch: 1, sequence: 4}]
capture: capture
backends:
  - {name: ort-web, bundle: webgpu}
cases:
  - match: {capture: capture}
    expect: stale-input
    reason: what this suite's own backend does
  - match: {capture: capture, backend: wgpu}
    expect: capture-mismatch
    reason: written for wgpu, which the suite does not declare
  - match: {capture: capture, bundle: jsep}
    expect: capture-unsupported
    reason: written for a build the suite does not declare
"""


def test_retargeted_cases_get_only_the_rules_that_name_their_backend(write_suite):
    """A rule naming no backend holds on the backends its suite declares; `--backend` puts
    other backends there, which get only the rules whose match names them."""
    suite = write_suite(RETARGETED)
    own = regress("list", suite)
    assert own.stdout.splitlines() == [
        "enc/batch=1,sequence=4/layout=default/ort-web:webgpu/capture  expect stale-input"
    ]
    wgpu = regress("list", suite, "--backend", "wgpu")
    assert wgpu.stdout.splitlines() == [
        "enc/batch=1,sequence=4/layout=default/wgpu/capture  expect capture-mismatch"
    ]
    every_build = regress("list", suite, "--backend", "ort-web")
    assert every_build.stdout.splitlines() == [
        "enc/batch=1,sequence=4/layout=default/ort-web:jsep/capture  expect capture-unsupported",
        "enc/batch=1,sequence=4/layout=default/ort-web:jspi/capture",
        "enc/batch=1,sequence=4/layout=default/ort-web:webgpu/capture  expect stale-input",
    ]
    reference = regress("list", suite, "--backend", "reference")
    assert reference.stdout.splitlines() == [
        "enc/batch=1,sequence=4/layout=default/reference/capture"
    ]


def test_the_bundled_suites_expect_only_what_they_say_on_any_one_backend():
    """`--backend wgpu` keeps the canaries' (and the decoder's) wgpu faults, the one behaviour
    the zoo states for wgpu (its unfused float16 LayerNorm), and nothing written for ort-web."""
    listed = regress("list", "suites", "--backend", "wgpu").stdout.splitlines()
    expecting = sorted(line.split("/")[0] for line in listed if "  expect " in line)
    assert expecting == sorted(
        ["stale-cache", "kernel-bug", "kernel-bug", "lazy-capture", "racy-replay", "stale-input",
         "input-snapshot", "crossed-graphs", "overflowing-tanh", "overflowing-tanh",
         "frozen-lengths", "frozen-cache", "layernorm-decomposed-float16"]
    )  # fmt: skip
