"""The viewer as files: two pages and their assets (shipped in the package, no CDN), the run's
data and each question's in script files (a browser refuses fetch() from file://, not a
script), each cited page's text once, and the run's plots. Written to a folder, or held in
memory for the server."""

from __future__ import annotations

import json
import time
from importlib.resources import files as package_files
from pathlib import Path

from prism.files import atomic_write
from producer.view.model import build
from workers.corpus import Corpus
from workers.runfiles import RunFiles

ASSETS = package_files("producer.view").joinpath("assets")
PAGES = ("index.html", "question.html")
STATIC = ("viewer.css", "viewer.js")


def site(files: RunFiles, corpus: Corpus | None, edgar_url: str, against: RunFiles | None = None) -> dict[str, bytes]:
    """Every file of the viewer of a run, by its path in the site."""
    view = build(files, corpus, edgar_url, against)
    out = {name: ASSETS.joinpath(name).read_bytes() for name in PAGES}
    out |= {f"assets/{name}": ASSETS.joinpath(name).read_bytes() for name in STATIC}
    for name in view.run["plots"]:
        out[f"plots/{name}"] = files.get(name)
    view.run["plots"] = [{"name": name, "src": f"plots/{name}"} for name in view.run["plots"]]
    out["data/run.js"] = _script("PRISM.run = ", view.run, ";")
    for q in view.questions:
        shown = [r[key] for r in q["rows"] for key in ("page_id", "previous_page_id")]
        q["page_files"] = sorted({f"data/p/{number}.js" for number in shown if number is not None})
        out[f"data/q/{q['n']}.js"] = _script(f"PRISM.question({q['n']}, ", q, ");")
    for number, text in enumerate(view.pages):
        out[f"data/p/{number}.js"] = _script(f"PRISM.page({number}, ", text, ");")
    return out


def export(
    files: RunFiles, corpus: Corpus | None, edgar_url: str, target: Path, against: RunFiles | None = None
) -> tuple[int, float]:
    """The viewer written into ``target`` (index.html its entry page); its bytes and seconds."""
    started = time.perf_counter()
    made = site(files, corpus, edgar_url, against)
    for path, data in made.items():
        atomic_write(target / path, data)  # a folder being served shows no half-written file
    return sum(len(data) for data in made.values()), time.perf_counter() - started


def _script(head: str, value: object, tail: str) -> bytes:
    """A value as a script statement; "<" escaped, so no text can end a script or open a tag."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    text = text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")
    return f"window.PRISM = window.PRISM || {{}};\n{head}{text}{tail}\n".encode()
