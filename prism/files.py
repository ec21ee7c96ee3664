"""A file written whole or not at all, for what threads and processes share outside a store (the
token encoding's cache, an exported site): each writer writes a temporary file of its own in the
target's folder and moves it into place with os.replace, so a reader finds the old file, the new
one or none, never half of one, and no writer moves or removes another's."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    """``data`` as ``path``'s content in one step; the last of several writers wins."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, mode)  # a plain file's usual mode, not mkstemp's 0600
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
