"""A run's folder has one writer: every key under runs/<id>/ is written by RunFiles, or by the
ledger for the jobs' outcomes, whichever command or worker writes it. Checked in the commands'
own processes: a sitecustomize module wraps the stores' writes and logs each key with the code
that wrote it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prism.runs.lifecycle import MOVES
from prism.testing.batches import BatchConfig
from prism.testing.simulator import Simulator, SimulatorConfig
from tests.conftest import ROWS_SAMPLE, fleet_env, prism_cli
from workers.runfiles import RunFiles
from workers.store import LocalStore

pytestmark = pytest.mark.integration

OWNERS = ("workers/runfiles.py", "workers/ledger.py")

# Loaded by every Python process the commands start: logs (key, the first caller outside the
# store) for each write or delete under a run's folder.
_LOGGER = """
import os, sys
import workers.store as store

def _logged(original):
    def write(self, key, *args, **kwargs):
        if key.startswith("runs/"):
            frame = sys._getframe(1)
            while frame.f_code.co_filename.endswith("workers/store.py"):
                frame = frame.f_back
            with open(os.environ["PRISM_TEST_WRITES"], "a") as log:
                log.write(f"{key}\\t{frame.f_code.co_filename}:{frame.f_code.co_name}\\n")
        return original(self, key, *args, **kwargs)
    return write

for cls in (store.LocalStore, store.S3Store):
    cls.put, cls.delete = _logged(cls.put), _logged(cls.delete)
"""


def test_run_folder_has_one_writer(tmp_path):
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(_LOGGER)
    writes = tmp_path / "writes.log"
    extra = {"PYTHONPATH": str(hooks), "PRISM_TEST_WRITES": str(writes)}
    with Simulator(SimulatorConfig(mode="lexical", cache=None)) as sim:
        sim.batch.config = BatchConfig(validate_s=0.1, process_s=0.3, finalize_s=0.1, cancel_s=0.1)
        plain = fleet_env(None, None, None, **extra)
        llm = fleet_env(
            None, None, sim.url, PRISM_CHECK_SYSTEM_PROMPT="false", PRISM_BATCH_POLL_S="0.3", PRISM_BATCH_GATHER_S="0.3"
        )
        for args, env in (
            (["run", "--run-id", "night"], plain),  # the bundled filings and their questions
            (["report", "night"], plain),
            (["resume", "night"], plain),
            (
                [
                    "run",
                    str(ROWS_SAMPLE),
                    "--via",
                    "batch",
                    "--run-id",
                    "batched",
                ],
                llm | extra,
            ),
        ):
            done = prism_cli(args, env, tmp_path)
            assert done.returncode == 0, (args, done.stderr[-3000:])
    logged = [line.split("\t") for line in writes.read_text().splitlines()]
    elsewhere = sorted(
        {
            f"{key.split('/', 2)[2]} <- {Path(caller).relative_to(_root(caller))}"
            for key, caller in logged
            if not _owned(caller)
        }
    )
    assert not elsewhere, elsewhere
    # The hook saw what these commands write: the manifests, a question's outcome, a batch's records.
    written = {key for key, _ in logged}
    for part in (
        "runs/night/manifest.json",
        "runs/night/report.md",
        "runs/batched/batch/batches/",
        "runs/batched/inputs/",
    ):
        assert any(key.startswith(part) for key in written), part


def _owned(caller: str) -> bool:
    return any(caller.split(":", 1)[0].endswith(owner) for owner in OWNERS)


def _root(caller: str) -> Path:
    path = Path(caller.split(":", 1)[0])
    return next((p for p in path.parents if (p / "pyproject.toml").exists()), path.parent)


def test_a_manifest_moves_only_as_moves_allow(tmp_path):
    from datetime import UTC, datetime

    from prism.models import RunConfig, RunManifest

    files = RunFiles(LocalStore(tmp_path), "r1")
    manifest = RunManifest(
        run_id="r1",
        status="planning",
        input="in",
        results=str(tmp_path),
        created_at=datetime.now(UTC),
        config=RunConfig(),
        settings={},
        code_version="test",
        embedded=True,
    )
    files.put_manifest(manifest)
    assert "complete" not in MOVES["planning"]
    with pytest.raises(ValueError, match="from planning to complete"):
        files.put_manifest(manifest.model_copy(update={"status": "complete"}))
    files.put_manifest(manifest.model_copy(update={"status": "running"}))
    files.put_manifest(manifest.model_copy(update={"status": "complete"}))
    with pytest.raises(ValueError, match="from complete to running"):
        RunFiles(LocalStore(tmp_path), "r1").put_manifest(manifest.model_copy(update={"status": "running"}))
    assert json.loads((tmp_path / "runs" / "r1" / "manifest.json").read_text())["status"] == "complete"
