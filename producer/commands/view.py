"""`prism view RUN_ID`: the run's evidence in a browser, served on 127.0.0.1 or written as files."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from producer.commands.common import console
from producer.flags import flags, settings_with
from producer.spec import RunError


@flags("view")
def view(
    run_id: str,
    against: Annotated[
        str | None, typer.Option("--against", help="Another run over the same corpus: what changed in each top five.")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", help="Write the viewer as static files into this folder (DIR/index.html).")
    ] = None,
    port: Annotated[int, typer.Option("--port", help="Serve on this port (0: any free one).")] = 8765,
    host: Annotated[
        str, typer.Option("--host", help="Serve on this address; other than 127.0.0.1 only on purpose.")
    ] = "127.0.0.1",
    open_browser: Annotated[bool, typer.Option("--open", help="Open the viewer in a browser.")] = False,
    **options: Any,
) -> None:
    """Each question's evidence on its cited page with the passage marked, the run's status, cost
    and failures, and what changed against another run. Read from the run's store (a folder or
    s3://); served read-only on 127.0.0.1, or with --out written as files that open from disk or
    any static host."""
    from producer.reader import check_run_id
    from producer.view.site import export, site
    from workers.corpus import Corpus
    from workers.runfiles import RunFiles
    from workers.store import open_store

    settings = settings_with(options)
    store = open_store(settings.results, settings)
    files = RunFiles(store, check_run_id(run_id))
    try:
        manifest = files.manifest()
    except KeyError:
        raise RunError(f"no run {run_id!r} in {store.uri}") from None
    other = RunFiles(store, check_run_id(against)) if against else None
    if other is not None and not store.exists(other.layout.file("manifest.json")):
        raise RunError(f"--against {against}: no such run in {store.uri}")
    corpus = Corpus(open_store(manifest.corpus, settings)) if manifest.corpus else None
    if out is not None:
        size, seconds = export(files, corpus, settings.edgar_url, out, other)
        console.print(
            f"the viewer of run {run_id}: {out / 'index.html'} ({size / 1e6:.1f} MB in {seconds:.1f} s)",
            highlight=False,
        )
        return
    _serve(site(files, corpus, settings.edgar_url, other), host, port, open_browser)


def _serve(made: dict[str, bytes], host: str, port: int, open_browser: bool) -> None:
    from producer.view.serve import server

    httpd = server(made, host, port)
    bound_host, bound_port = httpd.server_address[:2]
    address = f"http://{bound_host!s}:{bound_port}/"
    console.print(f"serving the viewer at {address} (Ctrl-C stops it)", highlight=False)
    if open_browser:
        import webbrowser

        webbrowser.open(address)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        console.print("stopped")
    finally:
        httpd.server_close()
