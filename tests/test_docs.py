"""The README is a quick start whose first screen holds the two commands and whose first case runs
as written; the reference lives in docs/, one page per topic; every relative link between them
resolves, file and #anchor."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from .conftest import REPO, regress

PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def _anchors(page: Path) -> set[str]:
    """The #anchors GitHub gives a page's headings: lowercase, punctuation dropped, spaces to
    hyphens, repeats numbered."""
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#+ (.+)$", FENCE.sub("", page.read_text()), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _links(page: Path) -> list[str]:
    return [
        target
        for target in LINK.findall(FENCE.sub("", page.read_text()))
        if not re.match(r"[a-z]+:", target)
    ]


def test_every_relative_link_resolves_to_a_file_and_an_anchor():
    checked, broken = 0, []
    for page in PAGES:
        for target in _links(page):
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            checked += 1
            if not linked.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and anchor not in _anchors(linked):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading)")
    assert not broken
    assert checked >= len(PAGES)  # the README links every page, pages link one another


def test_the_readme_starts_with_the_two_commands_and_links_every_page():
    readme = (REPO / "README.md").read_text()
    first_screen = "\n".join(readme.splitlines()[:15])
    assert "nox -s regress" in first_screen and "nox -s tests" in first_screen
    assert len(readme.splitlines()) < 110
    linked = {Path(target.partition("#")[0]).name for target in _links(REPO / "README.md")}
    assert linked >= {page.name for page in PAGES[1:]}


def test_every_section_of_the_reference_is_kept():
    headings = {
        heading.strip()
        for page in PAGES
        for heading in re.findall(r"^#+ (.+)$", FENCE.sub("", page.read_text()), re.M)
    }
    assert headings >= {
        "The bug class", "Exit codes", "Commands", "Writing a suite",
        "Capture as applications use it", "Uniform fields and layouts",
        "ONNX Runtime Web's operator tests", "Results", "Verdicts", "Backends", "Versions",
        "Detectors, faults and canaries", "Bundled suites", "Repro bundles", "Throughput",
        "Tests", "Architecture", "Adding a backend", "Expectations on another backend",
    }  # fmt: skip


def test_ci_runs_the_readme_test_command():
    command = re.search(r"^(nox -s tests)\b", (REPO / "README.md").read_text(), re.M).group(1)
    assert command in (REPO / ".ci" / "run").read_text().splitlines()


def _my_model(path: Path) -> None:
    """A model of one's own: x[batch, 16] through a MatMul and a LayerNormalization."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.uniform(-1, 1, shape).astype(np.float32), name)
        for name, shape in (("w", (16, 16)), ("scale", (16,)), ("bias", (16,)))
    ]
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("LayerNormalization", ["h", "scale", "bias"], ["y"], epsilon=1e-5),
    ]
    graph = helper.make_graph(
        nodes,
        "mine",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    onnx.save(model, path)  # IR 9: onnxruntime-web 1.30 reads up to 13, onnx writes 14


@pytest.mark.browser
def test_the_readmes_first_case_runs_as_written_and_prints_what_it_shows(tmp_path):
    section = (REPO / "README.md").read_text().partition("## A first case")[2].partition("\n## ")[0]
    suite, command, printed = re.findall(r"^```\w+\n(.*?)^```", section, re.S | re.M)
    (tmp_path / "my-suite.yaml").write_text(suite)
    _my_model(tmp_path / "my-model.onnx")
    program, module, *args = shlex.split(command)
    assert (program, module) == ("python", "-m") and args[0] == "runner"
    done = regress(*args[1:], cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr

    def lines(text: str) -> list[str]:
        """`text`'s lines, its timings and run id left out."""
        text = re.sub(r"\d+\.\d+ s\b", "N s", text)
        return re.sub(r"\d{8}T\d{6}Z-[0-9a-f]{6}", "RUN", text).splitlines()

    assert lines(done.stdout + done.stderr) == lines(printed)
