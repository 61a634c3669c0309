"""The ort-web asset server: only its table of names, bound to 127.0.0.1, gone when closed."""

from __future__ import annotations

import http.client
from pathlib import Path

import pytest

from runner.backends.ortweb.server import AssetServer


@pytest.fixture
def served(tmp_path: Path):
    page = tmp_path / "harness.html"
    page.write_text("<!doctype html>")
    (tmp_path / "secret.txt").write_text("not for the browser")
    server = AssetServer({"/harness.html": page})
    yield server
    server.close()


def get(server: AssetServer, path: str, method: str = "GET") -> tuple[int, dict, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", int(server.origin.rsplit(":", 1)[1]))
    connection.request(method, path)  # sent as written: no client-side normalization
    response = connection.getresponse()
    answer = response.status, dict(response.getheaders()), response.read()
    connection.close()
    return answer


def test_serves_its_files_and_registered_bytes_by_content_names(served):
    assert served.origin.startswith("http://127.0.0.1:")
    status, headers, body = get(served, "/harness.html?cache=bust")
    assert (status, headers["Content-Type"], body) == (200, "text/html; charset=utf-8",
                                                       b"<!doctype html>")  # fmt: skip
    path = served.register(b"\x00\x01model bytes")
    other = served.register(b"\x00\x02other bytes")
    assert path != other and path.startswith("/data/") and "model" not in path
    status, headers, body = get(served, path)
    assert (status, headers["Content-Type"], headers["Cache-Control"], body) == (
        200, "application/octet-stream", "no-store", b"\x00\x01model bytes"
    )  # fmt: skip
    assert get(served, path, "HEAD")[:2][0] == 200
    served.unregister(path)
    assert get(served, path)[0] == 404
    assert get(served, other)[0] == 200


def test_the_same_bytes_registered_twice_stay_until_both_are_unregistered(served):
    path = served.register(b"shared input")
    assert served.register(b"shared input") == path
    served.unregister(path)
    assert get(served, path)[2] == b"shared input"
    served.unregister(path)
    assert get(served, path)[0] == 404


@pytest.mark.parametrize(
    "path",
    ["/", "/data/", "/secret.txt", "/../secret.txt", "/harness.html/../secret.txt",
     "/%2e%2e/secret.txt", "//etc/passwd", "/data/0123"],
)  # fmt: skip
def test_anything_else_is_not_found(served, path):
    status, _, body = get(served, path)
    assert status == 404
    assert b"not for the browser" not in body and b"<li>" not in body


def test_only_get_and_head(served):
    assert get(served, "/harness.html", "POST")[0] == 501


def test_close_stops_listening():
    server = AssetServer({})
    port = int(server.origin.rsplit(":", 1)[1])
    server.close()
    with pytest.raises(ConnectionRefusedError):
        http.client.HTTPConnection("127.0.0.1", port, timeout=5).request("GET", "/")
