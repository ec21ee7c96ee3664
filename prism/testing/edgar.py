"""An imitation of EDGAR for tests and benchmarks, as the provider simulator is of an LLM API: it
serves a folder in EDGAR's layout (``Archives/edgar/data/CIK/ACCESSION.txt``,
``Archives/edgar/full-index/YYYY/QTRn/form.idx``, ``Archives/edgar/daily-index/...``) over HTTP
and enforces SEC's fair-access policy as SEC does: a request without a User-Agent, or past 10 a
second from one client (counted over the arrivals of the last second), gets the 403 "Request
Rate Threshold Exceeded" page. It logs every request, can answer a storm of 403s or an HTML error
page in place of a filing, and stops when told, in the middle of a fetch or not.

``write_layout`` lays out copies of the real filings (prism/testing/feed.py) with their indexes.

    python -m prism.testing.edgar FOLDER [--port 8800]
"""

from __future__ import annotations

import argparse
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prism.corpus.edgar import THRESHOLD, daily_index, full_index, quarter
from prism.testing.feed import Copy, form_index

LIMIT = 10  # requests a second, per client
THRESHOLD_PAGE = f"""<!DOCTYPE html>
<html><head><title>SEC.gov | {THRESHOLD}</title></head>
<body><h1>Your request rate is over the limit</h1>
<p>This address sent more than {LIMIT} requests in one second, or sent them without a User-Agent that
names who is asking. Slow down, say who you are, and try again in a while.</p></body></html>
""".encode()
ERROR_PAGE = (
    b"<!DOCTYPE html><html><head><title>SEC.gov | Service Unavailable</title></head><body>Try later.</body></html>"
)


@dataclass
class Seen:
    at: float  # monotonic
    path: str
    status: int
    client: str


@dataclass
class Imitation:
    root: Path
    host: str = "127.0.0.1"
    port: int = 0
    log: list[Seen] = field(default_factory=list)
    storm: int = 0  # this many requests are answered with the threshold page, from the storm_at-th on
    storm_at: int = 0
    error_pages: set[str] = field(default_factory=set)  # paths answered with an HTML page and a 200

    def __post_init__(self) -> None:
        self._arrivals: dict[str, deque[float]] = {}
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer((self.host, self.port), _handler(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self._server.server_address[1]}"

    def start(self) -> Imitation:
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def answer(self, path: str, client: str, agent: str | None) -> tuple[int, bytes]:
        now = time.monotonic()
        with self._lock:
            arrivals = self._arrivals.setdefault(client, deque())
            arrivals.append(now)
            while arrivals and arrivals[0] <= now - 1.0:
                arrivals.popleft()
            storming = self.storm > 0 and len(self.log) >= self.storm_at
            if not agent or len(arrivals) > LIMIT or storming:
                self.storm -= storming
                status, body = 403, THRESHOLD_PAGE
            elif path in self.error_pages:
                status, body = 200, ERROR_PAGE
            else:
                status, body = self._file(path)
            self.log.append(Seen(now, path, status, client))
        return status, body

    def _file(self, path: str) -> tuple[int, bytes]:
        target = (self.root / path.lstrip("/")).resolve()
        if self.root.resolve() not in target.parents or not target.is_file():
            return 404, b"<html><body>Not Found</body></html>"
        return 200, target.read_bytes()

    def max_per_second(self) -> int:
        """The most requests that arrived in any one second."""
        times = sorted(s.at for s in self.log)
        most, first = 0, 0
        for last, at in enumerate(times):
            while at - times[first] >= 1.0:
                first += 1
            most = max(most, last - first + 1)
        return most

    def refused(self) -> int:
        return sum(1 for s in self.log if s.status == 403)

    def requests(self, under: str = "/Archives/edgar/data/") -> list[str]:
        return [s.path for s in self.log if s.path.startswith(under)]

    def __enter__(self) -> Imitation:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _handler(imitation: Imitation) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            status, body = imitation.answer(
                self.path.split("?")[0], self.client_address[0], self.headers.get("User-Agent")
            )
            self.send_response(status)
            self.send_header(
                "Content-Type",
                "text/html" if body.lstrip()[:1] == b"<" and b"<html" in body[:200].lower() else "text/plain",
            )
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
            return

    return Handler


def write_layout(root: Path, filings: Iterable[Copy]) -> list[Copy]:
    """The filings under ``root`` as EDGAR lays them out, with each day's form index and each
    quarter's full form index; the filings written."""
    written = list(filings)
    by_day: dict[date, list[Copy]] = {}
    for f in written:
        path = root / "Archives" / "edgar" / "data" / str(int(f.cik)) / f"{f.accession}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(f.data)
        by_day.setdefault(f.filed, []).append(f)
    by_quarter: dict[tuple[int, int], list[Copy]] = {}
    for day, found in by_day.items():
        _write(root, daily_index(day), form_index(found))
        by_quarter.setdefault((day.year, quarter(day)), []).extend(found)
    for (year, qtr), found in by_quarter.items():
        _write(root, full_index(year, qtr), form_index(found))
    return written


def _write(root: Path, path: str, text: str) -> None:
    target = root / path.lstrip("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text)


def main() -> None:
    args = argparse.ArgumentParser(description="Serve a folder in EDGAR's layout, as EDGAR would.")
    args.add_argument("root", type=Path)
    args.add_argument("--port", type=int, default=8800)
    given = args.parse_args()
    imitation = Imitation(given.root, port=given.port)
    print(f"serving {given.root} at {imitation.url}", flush=True)
    imitation._server.serve_forever()


if __name__ == "__main__":
    main()
