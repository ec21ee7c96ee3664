"""The README and docs/ say what the code does: every shell block marked runnable
(`<!-- runnable -->` above a ```sh block) runs as written, in a fresh folder with nothing
configured, and ends with exit 0; every page the README links exists; the README stays a front
door (250 lines at most)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUNNABLE = re.compile(r"<!-- runnable -->\s*```sh\n(.*?)```", re.S)


def _blocks(page: Path) -> list[str]:
    return RUNNABLE.findall(page.read_text())


def test_the_readme_is_a_front_door_and_its_links_hold():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    first_screen = "\n".join(text.splitlines()[:12])
    assert "make run" in first_screen and "make test" in first_screen
    links = re.findall(r"\]\((docs/[^)#]+)", text)
    assert links and all((ROOT / link).is_file() for link in links), [
        link for link in links if not (ROOT / link).is_file()
    ]
    assert {p.name for p in (ROOT / "docs").glob("*.md")} <= {Path(link).name for link in links}, (
        "a docs page no link reaches"
    )
    assert any(_blocks(page) for page in PAGES), "no runnable block"


@pytest.mark.parametrize("page", [p for p in PAGES if _blocks(p)], ids=lambda p: p.name)
def test_every_runnable_block_runs_as_written(page: Path, tmp_path: Path):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRISM_", "OPENAI_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for block in _blocks(page):
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, f"{page.name}:\n{block}\n{done.stderr[-3000:]}"
