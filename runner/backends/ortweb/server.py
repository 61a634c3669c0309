"""A local HTTP server that serves one run's assets to the browser, and nothing else.

WebGPU exists only in a secure context, so pages come from ``http://127.0.0.1:<port>``. The
server knows a fixed table of names: the harness files, onnxruntime-web's dist files, and the
bytes registered for the run (models, inputs) under names made from their content. Any other
path is a 404: there is no directory listing and no path is ever joined onto a folder.
"""

from __future__ import annotations

import hashlib
import sys
import threading
from collections import Counter
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".wasm": "application/wasm",
    ".json": "application/json",
    ".map": "application/json",
}


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        """A browser gone mid-request (closed, killed, Ctrl-C) is no error of ours."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


@dataclass(frozen=True)
class _Asset:
    content_type: str
    file: Path | None = None  # served from disk (large, fixed files)
    data: bytes | None = None  # served from memory (registered bytes)
    cacheable: bool = True


def _file_asset(file: Path) -> _Asset:
    return _Asset(CONTENT_TYPES.get(file.suffix, "application/octet-stream"), file=file)


class AssetServer:
    """Serves ``files`` (url path -> file) plus bytes registered with ``register``."""

    def __init__(self, files: dict[str, Path]):
        self._assets: dict[str, _Asset] = {path: _file_asset(file) for path, file in files.items()}
        self._registrations: Counter[str] = Counter()
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server._answer(self, send_body=True)

            def do_HEAD(self) -> None:
                server._answer(self, send_body=False)

            def log_message(self, format: str, *args) -> None:  # quiet: the page reports errors
                pass

        self._httpd = _Server(("127.0.0.1", 0), Handler)
        # serve_forever notices shutdown() only between polls: a short poll, a quick close
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, args=(0.01,), name="ort-web-assets", daemon=True
        )
        self._thread.start()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_port}"

    def url(self, path: str) -> str:
        return f"{self.origin}{path}"

    def serve(self, files: dict[str, Path]) -> None:
        """Serve more fixed files (url path -> file), e.g. another version's dist/."""
        with self._lock:
            self._assets.update({path: _file_asset(file) for path, file in files.items()})

    def register(self, data: bytes) -> str:
        """Serve ``data`` until as many ``unregister`` calls; returns its URL path, named by
        its content so that a page may keep what it fetched (an eager case and its capture twin
        share a model)."""
        path = f"/data/{hashlib.sha256(data).hexdigest()[:32]}"
        with self._lock:
            self._assets[path] = _Asset("application/octet-stream", data=data, cacheable=False)
            self._registrations[path] += 1
        return path

    def unregister(self, path: str) -> None:
        with self._lock:
            self._registrations[path] -= 1
            if self._registrations[path] <= 0:
                del self._registrations[path]
                self._assets.pop(path, None)

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()

    def _answer(self, request: BaseHTTPRequestHandler, send_body: bool) -> None:
        with self._lock:
            asset = self._assets.get(urlsplit(request.path).path)
        if asset is None:
            request.send_error(HTTPStatus.NOT_FOUND)
            return
        body = asset.data if asset.data is not None else asset.file.read_bytes()
        request.send_response(HTTPStatus.OK)
        request.send_header("Content-Type", asset.content_type)
        request.send_header("Content-Length", str(len(body)))
        request.send_header("Cache-Control", "max-age=3600" if asset.cacheable else "no-store")
        request.end_headers()
        if send_body:
            request.wfile.write(body)
