"""The repository holds only the project: no package archives, no environments or build outputs,
and no file over 2 MB unless it is listed data with a SOURCE.md beside it."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LARGE_BYTES = 2 * 1024 * 1024

# Large data files the project ships on purpose; each folder's SOURCE.md says where they come from.
LISTED_DATA: tuple[str, ...] = ()

ARCHIVE_SUFFIXES = (".whl", ".egg", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".gguf", ".pyc")
BUILD_PARTS = {".venv", "venv", "site-packages", "__pycache__", "build", "dist", ".tox", ".eggs"}


def tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    return [p for p in out.decode().split("\0") if p]


def offences(paths: list[str], root: Path = ROOT) -> list[str]:
    """What each tracked path breaks, if anything."""
    found = []
    for path in paths:
        parts = set(Path(path).parts)
        file = root / path
        if path.endswith(ARCHIVE_SUFFIXES):
            found.append(f"{path}: a package archive")
        elif parts & BUILD_PARTS or any(p.endswith((".egg-info", ".dist-info")) for p in parts):
            found.append(f"{path}: an environment or build output")
        elif file.is_file() and file.stat().st_size > LARGE_BYTES:
            if path not in LISTED_DATA or not file.parent.joinpath("SOURCE.md").is_file():
                found.append(f"{path}: over 2 MB and not listed data with a SOURCE.md")
    return found


def test_the_repository_holds_only_the_project():
    assert not offences(tracked())


def test_the_check_names_each_kind_of_file_that_does_not_belong(tmp_path):
    """The check itself can fail: an archive, an environment and a large unlisted file are named."""
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "big.bin").write_bytes(b"0" * (LARGE_BYTES + 1))
    (tmp_path / "data" / "small.jsonl.gz").write_bytes(b"0" * 100)
    paths = ["numpy-2.4.6-cp311-manylinux.whl", "llama_cpp_python-0.3.36.tar.gz", ".venv/bin/python", "data/big.bin"]
    found = offences(paths + ["data/small.jsonl.gz", "README.md"], root=tmp_path)
    assert [f.split(": ")[1] for f in found] == [
        "a package archive",
        "a package archive",
        "an environment or build output",
        "over 2 MB and not listed data with a SOURCE.md",
    ]
