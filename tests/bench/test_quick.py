"""Every benchmark's `--quick` run, so none rots unseen: it exits 0 and its last line holds the
figures it declares (its KEYS), as `key=value` pairs. The runs share one S3 server; each starts
the rest of what it needs. A lane of its own (`make bench-quick`): benchmarks flush Redis DBs of
their own, which the parallel test processes must not be using."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from workers.testing import S3_KEYS

BENCH = Path(__file__).resolve().parents[2] / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if not p.name.startswith("_"))

pytestmark = pytest.mark.bench


def declared_keys(script: Path) -> tuple[str, ...]:
    """The KEYS a benchmark declares, read without running it."""
    for node in ast.parse(script.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "KEYS" for t in node.targets):
            return tuple(ast.literal_eval(node.value))
    raise AssertionError(f"{script.name} declares no KEYS")


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.stem for p in SCRIPTS])
def test_each_benchmark_runs_quick_and_prints_its_keys(script: Path, s3_server: str):
    keys = declared_keys(script)
    env = os.environ | S3_KEYS | {"PRISM_BENCH_S3": s3_server}
    done = subprocess.run(
        [sys.executable, str(script), "--quick"], cwd=BENCH.parent, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-3000:]
    last = done.stdout.strip().splitlines()[-1]
    figures = dict(pair.split("=", 1) for pair in last.split())
    print(f"{script.stem}: {last}")  # shown with -rP: the figures a change can be compared by
    missing = [k for k in keys if k not in figures]
    assert not missing, f"{script.name} printed no {missing} on its last line: {last}"
