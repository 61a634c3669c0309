"""The test run's own scheduling (tests/conftest.py): under pytest-xdist's ``--dist loadgroup``
each test goes to a worker with its group, so that a module's fixtures are made once and the
``clock`` tests run one at a time. Where xdist cannot write the group into the node id (pytest
9.2 with pytest-xdist 3.8) every test is sent alone and a module fixture is made again on each
worker its tests land on: these tests then fail."""

from __future__ import annotations

import pytest


@pytest.fixture
def node_id(request) -> str:
    """This test's node id as the worker got it."""
    if not getattr(request.config.option, "loadgroup", False):
        pytest.skip("not run by pytest-xdist with --dist loadgroup")
    return request.node.nodeid


def test_a_test_is_sent_with_its_modules_group(node_id):
    assert node_id.endswith("@tests.test_scheduling")


@pytest.mark.clock
def test_a_clock_test_is_sent_with_the_clock_group(node_id):
    assert node_id.endswith("@clock")
