"""The viewer served over HTTP: the site's files from memory, nothing else. A path names a file of
the site or nothing (no path reaches the disk, so ``..`` and encoded slashes find nothing); the
server binds 127.0.0.1 unless told otherwise."""

from __future__ import annotations

import mimetypes
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

TYPES = {
    ".js": "text/javascript; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}


def server(site: dict[str, bytes], host: str = "127.0.0.1", port: int = 0) -> ThreadingHTTPServer:
    """A server of the site's files (port 0: any free port; its address is server.server_address)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            path = unquote(urlsplit(self.path).path).lstrip("/") or "index.html"
            data = site.get(path)
            if data is None:
                self.send_error(404, "not a file of this run's viewer")
                return
            suffix = path[path.rfind(".") :]
            self.send_response(200)
            self.send_header(
                "content-type", TYPES.get(suffix) or mimetypes.guess_type(path)[0] or "application/octet-stream"
            )
            self.send_header("content-length", str(len(data)))
            self.send_header("x-content-type-options", "nosniff")
            self.send_header("cache-control", "no-store")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - quiet: the command says where it serves
            return

    return ThreadingHTTPServer((host, port), Handler)
