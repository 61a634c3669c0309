"""Scenarios: a suite's ``scenarios:`` run on a backend and judged step by step.

``feeds`` says which inputs each run gets, ``judging`` builds the judge's ``Evidence`` from the
runs, ``step`` runs one scenario on one backend target and makes its stored result.
"""
