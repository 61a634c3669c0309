"""Case and scenario ids are unique in a selection: results, the history, ``--lf``, ``new-case``,
``repro`` and bisect all address a result by its id, so two suites giving one id are refused,
naming both files and lines; two suites sharing a model name without sharing an id run, and
every result reaches results.jsonl, history.sqlite and the report."""

from __future__ import annotations

import json
import os
import sqlite3

import pytest
from lxml import html as lxml_html

from .conftest import regress

MODEL = """
name: {name}
models:
  enc: {{builtin: encoder, layers: 1, hidden: 16, heads: 2, ffn: 32}}
shapes:
  - {{batch: 1, sequence: {sequence}}}
capture: capture
backends: [wgpu]
"""
SCENARIO = """
scenarios:
  - name: twice
    model: enc
    sessions: {s: {}}
    steps: [{run: s}, {run: s}]
"""


def test_two_suites_giving_one_case_id_are_refused_naming_both(write_suite, tmp_path):
    first = write_suite(MODEL.format(name="first", sequence=8), "first.yaml")
    second = write_suite(MODEL.format(name="second", sequence=8), "more/second.yaml")
    for command in (["validate"], ["list"], ["run", "--out", tmp_path / "out"]):
        proc = regress(*command, first, second)
        assert proc.returncode == 2, proc.stderr
        assert f"{second}:3:1: model 'enc' gives 1 id(s) that model 'enc' of {first}:3" in (
            proc.stderr
        )
        assert "enc/batch=1,sequence=8/layout=default/wgpu/capture" in proc.stderr
    assert not (tmp_path / "out").exists()  # refused before anything ran
    # --backend can make ids collide that the suites' own backends keep apart
    apart = write_suite(MODEL.format(name="apart", sequence=8).replace("[wgpu]", "[reference]"))
    assert regress("list", first, apart).returncode == 0
    moved = regress("list", first, apart, "--backend", "wgpu")
    assert moved.returncode == 2 and "model 'enc' gives 1 id(s)" in moved.stderr


def test_two_suites_giving_one_scenario_id_are_refused(write_suite):
    first = write_suite(MODEL.format(name="first", sequence=8) + SCENARIO, "first.yaml")
    second = write_suite(MODEL.format(name="second", sequence=4) + SCENARIO, "second.yaml")
    proc = regress("run", first, second, "--filter", "scenario=*")
    assert proc.returncode == 2
    assert f"{second}:10:1: scenario 'twice' gives 1 id(s) that scenario 'twice'" in (proc.stderr)
    assert f"of {first}:10 gives too, e.g. scenario=twice/wgpu" in proc.stderr


@pytest.mark.gpu
def test_every_result_of_two_suites_sharing_a_model_name_reaches_the_history(write_suite, tmp_path):
    """One model name on one target (wgpu) in two suites, their shapes apart: every result is
    stored, kept in history.sqlite and counted by the report; the report names the suites
    relative to their repository (they are outside the working directory)."""
    first = write_suite(MODEL.format(name="first", sequence=8), "first.yaml")
    second = write_suite(MODEL.format(name="second", sequence=4), "more/second.yaml")
    out = tmp_path / "out"
    proc = regress(
        "run", first, second, "--out", out, "--runs", "2", "--no-localize", "--report",
        env={"XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR", str(tmp_path))},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    [results] = (out / "runs").glob("*/results.jsonl")
    stored = [json.loads(line)["case_id"] for line in results.read_text().splitlines()]
    assert sorted(stored) == [
        "enc/batch=1,sequence=4/layout=default/wgpu/capture",
        "enc/batch=1,sequence=8/layout=default/wgpu/capture",
    ]
    with sqlite3.connect(out / "history.sqlite") as db:
        [(kept,)] = db.execute("SELECT count(*) FROM results").fetchall()
    assert kept == len(stored) == 2
    summary = (out / "summary.md").read_text()
    assert "**2 results**: 0 unexpected" in summary
    page = lxml_html.fromstring((out / "index.html").read_bytes())
    [suites] = page.get_element_by_id("latest").xpath(".//dt[text()='suites']/following::dd[1]")
    assert list(suites.itertext()) == ["first.yaml", "more/second.yaml"]
