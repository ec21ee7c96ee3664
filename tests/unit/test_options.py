"""Every option is declared once: its flags, its variable, its page row and its place in the job
fingerprint come from that declaration."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from prism.models import RunConfig
from prism.options import RunOptions, meta
from producer.flags import settings_with
from workers.settings import Settings, SettingsProblem

PRISM = str(Path(sys.executable).parent / "prism")


def test_a_default_configuration_keeps_the_job_ids_it_always_had():
    # The fingerprint of a default RunConfig as the first fingerprint made it: job ids of runs made
    # before every option was declared once are those of runs made after.
    assert RunConfig().fingerprint() == "ae437c2ec8e923f1"
    assert RunConfig().plan_fingerprint() == RunConfig().fingerprint()


def test_only_what_changes_a_result_is_in_the_fingerprints():
    base = RunConfig()
    for update in ({"via": "batch"}, {"budget_usd": 5}, {"limit": 3}):
        assert base.model_copy(update=update).plan_fingerprint() == base.plan_fingerprint(), update
    two = base.model_copy(update={"filings_per_question": 2})
    assert two.fingerprint() == base.fingerprint()  # a pair's ranking does not depend on it
    assert two.plan_fingerprint() != base.plan_fingerprint()  # a question's does
    assert base.model_copy(update={"top_n": 7}).fingerprint() != base.fingerprint()


def test_every_run_option_is_one_settings_field_with_help():
    for name, field in RunOptions.model_fields.items():
        assert Settings.model_fields[name] is not None and field.description, name
    assert meta(Settings.model_fields["prefilter_share"])["changes"] == "ranking"


def test_a_flag_wins_over_the_variable_and_is_named_when_bad(monkeypatch):
    monkeypatch.setenv("PRISM_FILINGS_PER_QUESTION", "2")
    assert settings_with({"filings_per_question": "3"}).run_config().filings_per_question == 3
    with pytest.raises(SettingsProblem, match="^--filings=0: expected a number of filings"):
        settings_with({"filings_per_question": "0"})
    with pytest.raises(SettingsProblem, match="^--prefilter-share=1.5"):
        settings_with({"prefilter_share": "1.5"})


@pytest.mark.parametrize("command", ["run", "enqueue", "estimate"])
def test_the_planning_commands_take_the_same_run_options(command):
    shown = subprocess.run([PRISM, command, "--help"], capture_output=True, text=True, check=True).stdout
    for flag in ("--questions", "--corpus", "--filings", "--prefilter-share", "--chunk-ranker", "--limit", "--compare"):
        assert flag in shown, (command, flag)


def test_defaults_are_stated_once_where_settings_build_the_request_path():
    """The retry policy, the request options, the models and the chunking that Settings build
    are those a bare construction gives: one set of defaults, declared on the settings."""
    from prism.ingest.models import Chunking
    from prism.llm.endpoints import RequestOptions, RetryPolicy

    settings = Settings()
    assert settings.retry_policy() == RetryPolicy()
    assert settings.request_options() == RequestOptions()
    assert settings.chunking() == Chunking()
    assert settings.run_config().models == RunConfig().models
    assert settings.model_copy(update={"chunk_ranker": "evidence"}).run_config().prefilter_keep == 20


def test_the_chunk_size_is_an_option_of_ingest_and_fetch_named_when_bad():
    assert settings_with({"chunk_tokens": "256"}).chunking().chunk_tokens == 256
    with pytest.raises(SettingsProblem, match="^--chunk-tokens=16"):
        settings_with({"chunk_tokens": "16"})  # below the least a filing's chunking takes
    for command in ("ingest", "fetch"):
        shown = subprocess.run([PRISM, command, "--help"], capture_output=True, text=True, check=True).stdout
        assert "--chunk-tokens" in shown and "PRISM_CHUNK_TOKENS" in shown, command
