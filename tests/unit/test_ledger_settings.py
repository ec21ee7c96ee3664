"""The ledger's keys, the settings' one-line errors and the CLI's refusal to show tracebacks."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from prism import names as method_names
from producer.flags import configuration_page
from workers.runfiles import Outcome, RunLayout
from workers.settings import Settings
from workers.store import safe_name

ROOT = Path(__file__).resolve().parents[2]
PRISM = str(Path(sys.executable).parent / "prism")
SAMPLE_ROWS = ROOT / "prism" / "data" / "sample.jsonl.gz"


def test_safe_names_fit_any_id_and_keep_ids_apart():
    ids = ["q1", "q/1", "q 1", "x" * 5000, "../../etc", "ü" * 300, ""]
    names = [safe_name(i) for i in ids]
    assert len(set(names)) == len(ids)
    assert all(re.fullmatch(r"[A-Za-z0-9._-]{1,64}", n) for n in names)
    assert safe_name("q/1") == safe_name("q/1")  # same id, same key on every rerun
    layout = RunLayout("r")
    assert layout.outcome(Outcome.FAILED, "chunks", "x" * 5000).startswith("runs/r/failures/chunks/")
    assert ".." not in layout.result("documents", "../../etc")


def _prism(args: list[str], **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PRISM_", "OPENAI_"))}
    return subprocess.run([PRISM, *args], env=clean | env, capture_output=True, text=True, timeout=120, cwd=ROOT)


BAD_SETTINGS = [
    ({"PRISM_TOP_N": "0"}, "PRISM_TOP_N=0"),
    ({"PRISM_SEGMENT_TOKENS": "10"}, "PRISM_SEGMENT_TOKENS=10"),
    ({"PRISM_LLM_LIMITS": "not json"}, "PRISM_LLM_LIMITS: not valid JSON"),
    ({"PRISM_DOC_RANKER": "nonsense"}, "PRISM_DOC_RANKER=nonsense: must be one of"),
    ({"PRISM_BUDGET_USD": "-1"}, "PRISM_BUDGET_USD=-1"),
    ({"PRISM_RESULTS": "s3://"}, "PRISM_RESULTS=s3://"),
    ({"PRISM_CONFIG": "/no/such/file.toml"}, "PRISM_CONFIG=/no/such/file.toml: no such file"),
    ({"PRISM_PREFILTER_SHARE": "30"}, "PRISM_PREFILTER_SHARE=30"),
    ({"PRISM_FILINGS_PER_QUESTION": "many"}, "PRISM_FILINGS_PER_QUESTION=many: expected a number of filings"),
    ({"PRISM_LLM_LIMITS": '{"*": {"tokens": "lots"}}'}, "PRISM_LLM_LIMITS"),
    ({"PRISM_PREFILTER_KEEP": "45", "PRISM_PREFILTER_SHARE": "0.3"}, "PRISM_PREFILTER_SHARE=0.3: PRISM_PREFILTER_KEEP"),
]


@pytest.mark.parametrize(
    ("env", "expected"), BAD_SETTINGS, ids=[e[1].split("=")[0].split(":")[0] for e in BAD_SETTINGS]
)
def test_a_bad_setting_is_one_line_naming_the_variable(env, expected):
    done = _prism(["run"], **env)
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_help_works_whatever_the_settings():
    done = _prism(["--help"], PRISM_DOC_RANKER="nonsense", PRISM_TOP_N="0")
    assert done.returncode == 0 and "Usage" in done.stdout


def test_an_unknown_key_in_the_config_file_is_an_error(tmp_path):
    config = tmp_path / "prism.toml"
    config.write_text("top_n = 3\nqrels_file = 'x'\n")
    done = _prism(["run"], PRISM_CONFIG=str(config))
    assert done.returncode == 2 and f"{config}: unknown key 'qrels_file'" in done.stderr


def test_a_config_file_that_is_not_toml_is_one_line_naming_it(tmp_path):
    config = tmp_path / "prism.toml"
    config.write_text("top_n = 3\nsegments = [\n")
    done = _prism(["run"], PRISM_CONFIG=str(config))
    assert done.returncode == 2 and f"PRISM_CONFIG={config}: not valid TOML" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


def test_a_results_store_that_is_a_file_is_refused_by_name(tmp_path):
    taken = tmp_path / "results.txt"
    taken.write_text("not a folder")
    by_flag = _prism(["run", "--results", str(taken)])
    by_variable = _prism(["run"], PRISM_RESULTS=str(taken))
    assert by_flag.returncode == by_variable.returncode == 2
    assert f"--results={taken}: a file" in by_flag.stderr and f"PRISM_RESULTS={taken}: a file" in by_variable.stderr


def test_an_ingest_to_a_broker_that_does_not_answer_stops_at_once_naming_it(tmp_path):
    folder = tmp_path / "filings"
    folder.mkdir()
    (folder / "acme-2024-10k.txt").write_text("Revenue was $5 million.\n")
    refused = "redis://:secret@127.0.0.1:1/0"  # port 1: nothing listens, the connection is refused
    done = _prism(["ingest", str(folder), "--corpus", str(tmp_path / "corpus")], PRISM_BROKER_URL=refused)
    assert done.returncode == 2, done.stderr
    assert "PRISM_BROKER_URL=redis://:****@127.0.0.1:1/0: no broker answers there" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "secret" not in done.stderr


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        (["run", str(SAMPLE_ROWS)], {"PRISM_BROKER_URL": "redis://127.0.0.1:1/0"}, "Redis is not reachable: "),
        (
            ["status", "nothing", "--results", "s3://bucket/prism"],
            {"PRISM_S3_ENDPOINT_URL": "http://127.0.0.1:1", "AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"},
            "the S3 store refused: ",
        ),
    ],
    ids=["redis", "s3"],
)
def test_a_service_that_does_not_answer_is_one_line_naming_its_settings(tmp_path, args, env, expected):
    done = _prism(args, PRISM_RESULTS=str(tmp_path / "results"), **env)
    assert done.returncode == 2, done.stderr
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith(f"error: {expected}") and "PRISM_" in error, done.stderr
    assert "Traceback" not in done.stderr + done.stdout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run", "--run-id", "../../x"], "--run-id '../../x'"),
        (["run", "--limit", "0"], "--limit"),
        (["run", "--top-n", "0"], "--top-n=0"),
        (["run", "--doc-ranker", "best"], "--doc-ranker=best: must be one of"),
        (["run", "--prefilter", "45", "--prefilter-share", "0.3"], "--prefilter-share=0.3: --prefilter is set too"),
    ],
)
def test_a_bad_flag_is_named(args, expected):
    done = _prism(args)
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr and "Traceback" not in done.stderr


def test_an_empty_input_is_a_clear_error(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    done = _prism(["run", str(empty), "--results", str(tmp_path / "results")])
    assert done.returncode == 2 and "no input rows" in done.stderr


def test_the_configuration_page_is_made_from_the_declarations_and_names_every_ranker():
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert page == configuration_page(), "docs/configuration.md is out of date: run `make docs`"
    rows = {m.group(1): line for line in page.splitlines() if (m := re.match(r"\| `(PRISM_[A-Z_0-9]+)`", line))}
    assert set(rows) == {f"PRISM_{name.upper()}" for name in Settings.model_fields}
    for task, variable in (("documents", "PRISM_DOC_RANKER"), ("chunks", "PRISM_CHUNK_RANKER")):
        missing = [name for name in method_names.names(task) if name not in rows[variable]]
        assert not missing, f"the row of {variable} misses {missing}"
    assert all(Settings.model_fields[name].description for name in Settings.model_fields), "an option has no help"
