"""The one place that talks to EDGAR. Every request, from the producer (index files) or a fetch
task (a filing), waits its turn at the fleet's limiter under one key, at PRISM_EDGAR_RPS counted
across every worker; a refusal for the rate (SEC's 403 threshold page, a 429, a 503) opens
EDGAR's circuit, and while it is open requests pause, one probe trying again after
PRISM_EDGAR_PAUSE_S. Every request names who is asking (PRISM_SEC_USER_AGENT)."""

from __future__ import annotations

import re
import threading
import time
import uuid
from dataclasses import dataclass
from urllib.parse import urlparse

import requests

from prism.corpus.edgar import refused_for_rate
from prism.ingest.sgml import is_submission
from prism.llm.endpoints import Rate
from workers.circuit import Circuits
from workers.limiter import LocalWindows, RedisWindows
from workers.messages import Fetched, FetchJob
from workers.settings import Settings
from workers.store import Store

WINDOW_S = 1.0  # SEC counts requests a second; the limiter keeps each a little longer (EDGE_S): the margin
TIMEOUT_S = 60.0


class EdgarPaused(Exception):
    """EDGAR refused for the rate, now or a while ago: try again after ``wait_s``."""

    def __init__(self, wait_s: float, why: str):
        super().__init__(f"EDGAR paused for {wait_s:.0f} s: {why}")
        self.wait_s, self.why = wait_s, why


class EdgarMissing(Exception):
    """A 404: EDGAR has nothing at that path."""


class EdgarError(Exception):
    """Any other answer that is not the file: said with its status."""


@dataclass
class Edgar:
    settings: Settings
    windows: RedisWindows | LocalWindows
    circuits: Circuits

    def __post_init__(self) -> None:
        self.name = f"edgar:{urlparse(self.settings.edgar_url).netloc}"  # its limiter key and its circuit
        self.requests = 0  # sent by this client
        self._local = threading.local()  # a session per thread: an embedded run fetches on threads

    @property
    def session(self) -> requests.Session:
        if not hasattr(self._local, "session"):
            session = requests.Session()
            agent = self.settings.sec_user_agent or ""
            session.headers.update({"User-Agent": agent, "Accept-Encoding": "gzip, deflate"})
            self._local.session = session
        return self._local.session

    def get(self, path: str) -> bytes:
        """The body at ``path`` under the base URL, once EDGAR is open and the limiter lets us."""
        probing = self._open_or_probe()
        self._turn()
        url = self.settings.edgar_url.rstrip("/") + path
        self.requests += 1
        try:
            response = self.session.get(url, timeout=TIMEOUT_S)
        except requests.RequestException as err:
            raise EdgarError(f"{url}: {type(err).__name__}: {err}") from None
        if refused_for_rate(response.status_code, response.content):
            why = f"{response.status_code} from {url}"
            self.circuits.failed(self.name, time.time(), why, ttl_s=2 * self.settings.edgar_pause_s + 60)
            self.circuits.probe(self.name, self.settings.edgar_pause_s)  # the next probe goes after the pause
            raise EdgarPaused(self.settings.edgar_pause_s, why)
        if probing or response.ok:
            self.circuits.closed(self.name)
        if response.status_code == 404:
            raise EdgarMissing(f"{url}: 404, not on EDGAR")
        if not response.ok:
            raise EdgarError(f"{url}: HTTP {response.status_code}")
        return response.content

    def _open_or_probe(self) -> bool:
        """True when this request is the probe of an open circuit; EdgarPaused when it waits."""
        outage = self.circuits.outage(self.name)
        if outage is None:
            return False
        if self.circuits.probe(self.name, self.settings.edgar_pause_s):
            return True
        raise EdgarPaused(min(self.settings.edgar_pause_s, 30.0), outage.error)

    def _turn(self) -> None:
        """Wait until the fleet has sent fewer than PRISM_EDGAR_RPS in the last second."""
        rate = Rate(amount=max(1, int(self.settings.edgar_rps)), seconds=WINDOW_S)
        entry = uuid.uuid4().hex
        while wait := self.windows.take(self.name, [("requests", rate, 1)], entry):
            time.sleep(min(wait, 1.0))


def fetch_filing(edgar: Edgar, store: Store, job: FetchJob) -> Fetched:
    """One filing into the target, written whole or not at all; one already there is not asked
    for again. EdgarPaused goes to the caller (the task waits); a 404, an error status or a
    page that is no EDGAR submission is a failure."""
    if store.exists(job.key):
        return Fetched(key=job.key, day=job.day, status="present")
    try:
        data = edgar.get(job.path)
    except (EdgarMissing, EdgarError) as err:
        return Fetched(key=job.key, day=job.day, status="failed", reason=str(err))
    if not is_submission(data):
        return Fetched(
            key=job.key, day=job.day, status="failed", reason=f"{job.path}: not an EDGAR submission ({_what(data)})"
        )
    store.put(job.key, data)  # written aside, then moved into place
    return Fetched(key=job.key, day=job.day, status="fetched", bytes=len(data))


def _what(data: bytes) -> str:
    """What came instead of a submission, in a few words."""
    title = re.search(rb"<title>(.*?)</title>", data[:4096], re.IGNORECASE | re.DOTALL)
    if title:
        return f"an HTML page: {' '.join(title.group(1).decode('utf-8', 'replace').split())[:80]!r}"
    return f"{len(data):,} bytes starting {data[:40]!r}"
