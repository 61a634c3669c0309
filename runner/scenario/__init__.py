"""Scenarios' vocabulary and judging, below the suites and the backends that use them.

``values`` holds what a step is and what a backend reports for it; ``judging`` builds the
judge's ``Evidence`` from a scenario's runs, session by session; ``bundled`` judges a repro
bundle's runs (a case's or a scenario's) as the suite would, on the bundle's page under Pyodide
too. A scenario is stepped, as a case is, by ``runner.step``.
"""
