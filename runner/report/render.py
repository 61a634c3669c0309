"""The report page: the report model (``model.py``) laid out by the Jinja2 templates in
``templates/``, with ``static/report.css`` and ``static/report.js`` inlined, and ``data.js``
beside it holding the folded rows.

Autoescape is on for every template: whatever a suite or a run wrote (case ids, messages, bug
links, suite names, reasons, environment) is escaped in the page and in data.js alike (data.js
holds rows rendered by the same macros). A Content-Security-Policy forbids every request but
that one script beside the page, so it reads the same offline, from disk.
"""

from __future__ import annotations

import hashlib
import json
from functools import cache
from importlib.resources import files

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
from markupsafe import Markup

from runner.report.analysis import KIND_LABELS
from runner.report.model import DATA_FILE, Badge, Report, case_anchor
from runner.verdicts import VERDICT_CODES, VERDICTS

CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'self' 'unsafe-inline'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)


def templates(package: str) -> Environment:
    """Jinja2 over `package`'s templates/, escaping every value that reaches the HTML."""
    return Environment(
        loader=PackageLoader(package, "templates"),
        autoescape=select_autoescape(["j2"], default_for_string=True, default=True),
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


@cache
def environment() -> Environment:
    env = templates("runner.report")
    env.globals.update(
        CSP=Markup(CSP),  # a constant: its quotes stay readable
        DATA_FILE=DATA_FILE,
        KIND_LABELS=KIND_LABELS,
        VERDICTS=VERDICTS,
        VERDICT_CODES=VERDICT_CODES,
        Badge=Badge,
        case_anchor=case_anchor,
    )
    return env


def _static(name: str) -> Markup:
    """A file of ``static/``, trusted as it is: it ships with the package."""
    return Markup(files("runner.report").joinpath("static", name).read_text(encoding="utf-8"))


def render_page(report: Report) -> tuple[str, str]:
    """The HTML document, and the script (``DATA_FILE``) holding its folded rows and which fold
    holds each folded row's id; the page accepts only the data.js of its own build."""
    env = environment()
    macros = env.get_template("macros.html.j2").module
    folds, anchors = {}, {}
    for listing in report.listings:
        if listing.into_data and listing.folded:
            folds[listing.name] = str(macros.rows(listing, listing.folded))
            anchors.update(dict.fromkeys(listing.anchors(), listing.name))
    data = json.dumps({"folds": folds, "anchors": anchors}, sort_keys=True)
    build = hashlib.sha1(data.encode()).hexdigest()[:16]
    script = f'window.REPORT_DATA = {{"build": "{build}", {data[1:]};\n'
    page = env.get_template("page.html.j2").render(
        report=report,
        build=build,
        style=_static("report.css"),
        script=_static("report.js"),
    )
    return page, script
