"""Every Redis key the fleet writes, with how long it lives. Nothing else spells a key."""

from __future__ import annotations

import hashlib

DAY = 24 * 3600

# The broker's queue as the Redis transport keeps it: one list per priority step
# (workers.messages.Priority), the first under the queue's own name, each other under
# "<queue>:<step>" (the transport's separator is set to ":" in workers/app.py).
QUEUE = "celery"
PRIORITY_SEP = ":"
PRIORITY_STEPS = (0, 3, 6, 9)  # the Redis transport's


def queue_lists(queue: str = QUEUE) -> list[str]:
    return [queue, *(f"{queue}{PRIORITY_SEP}{step}" for step in PRIORITY_STEPS[1:])]


# Fleet metrics: one hash of counters for every process and host (read by `prism exporter`).
METRICS = "prism:metrics"
METRICS_TTL_S = None  # counters for the life of the fleet

# The fleet limiter's sliding windows: a log and its sum per limit (they expire with the window).
LIMITER_PREFIX = "prism:limits"


def limiter_log(name: str, kind: str) -> str:
    """``name``: "<endpoint>:<model>" or "prompt:<key>"; ``kind``: requests or tokens."""
    return f"{LIMITER_PREFIX}:{name}:{kind}"


def limiter_sum(name: str, kind: str) -> str:
    return f"{LIMITER_PREFIX}:{name}:{kind}:sum"


# A (endpoint, model)'s slots (PRISM_LLM_CONCURRENCY): the requests in flight, each a holder with
# its lease's end as score (a killed worker's slot comes back when its lease lapses), and the cap,
# for `prism status`. Both expire a while after the last request.
SLOT_LEASE_S = 30.0  # renewed every third of it while its request runs


def slot_name(endpoint: str, model: str) -> str:
    """An (endpoint, model)'s name for its slots: a space apart, as model names (Ollama's
    "llama3:8b") and endpoint keys ("openai:http://host:8080/v1") both hold colons."""
    return f"{endpoint} {model}"


def slots(name: str) -> str:
    return f"prism:slots:{name}"


def slots_cap(name: str) -> str:
    return f"prism:slots:{name}:cap"


# Where the limit adapts: the limit now and why (a hash), its path (a list of [time, limit]),
# the answers waiting for the controller (a list), and which process steers it (a lease).
# All expire a day after the last request.
SLOTS_TTL_S = DAY
SLOTS_LEAD_S = 5.0  # a controller that stops deciding this long hands the lead to another
SLOTS_ANSWERS_KEPT = 5000  # answers waiting for a controller, the newest
SLOTS_PATH_KEPT = 500  # changes of the limit kept, the newest


def slots_limit(name: str) -> str:
    return f"prism:slots:{name}:limit"


def slots_path(name: str) -> str:
    return f"prism:slots:{name}:path"


def slots_answers(name: str) -> str:
    return f"prism:slots:{name}:answers"


def slots_lead(name: str) -> str:
    return f"prism:slots:{name}:lead"


# What a self-hosted server's context turned out to be, learned from its overflow replies, by
# "<endpoint>:<model>": kept for the endpoint, so later requests and runs fit it.
LLM_CONTEXTS = "prism:llm:contexts"


# The hot LLM response cache; entries expire after PRISM_CACHE_HOT_TTL_S.
CACHE_PREFIX = "prism:cache:"

# A run's budget: micro-USD spent and reserved, and the exhausted mark.
BUDGET_TTL_S = 30 * DAY  # long after the run: a resume reads what was spent


# Prompt-cache scheduling: a key (one model, one filing segment) is warm at the provider after its
# first answered request, for about the provider's in-memory retention; a warm-up in flight is
# claimed so the other requests of the key wait for it (the claim lapses should its holder die).
PROMPT_WARM_TTL_S = 5 * 60


def prompt_warm(key: str) -> str:
    return f"prism:prompt:{key}:warm"


def prompt_warming(key: str) -> str:
    return f"prism:prompt:{key}:warming"


# An LLM endpoint's open circuit (workers.circuit): since when it is down and its last failure,
# forgotten this long after its last failure: past the longest wait (prism.llm.OUTAGE_WAIT_S), so
# an outage is never forgotten while jobs wait for it, and the next night starts closed; and the
# claim of its one probe per wait (it lapses after the wait).
CIRCUIT_TTL_S = 5 * 60


def circuit(endpoint: str) -> str:
    return f"prism:circuit:{endpoint}"


def circuit_probe(endpoint: str) -> str:
    return f"prism:circuit:{endpoint}:probe"


def cache(key: str) -> str:
    return f"{CACHE_PREFIX}{key}"


def budget_spent(run_id: str) -> str:
    return f"prism:budget:{run_id}:spent"


def budget_reserved(run_id: str) -> str:
    return f"prism:budget:{run_id}:reserved"


def budget_exhausted(run_id: str) -> str:
    return f"prism:budget:{run_id}:exhausted"


# A run's progress: the safe names of the jobs that have an outcome, for watching without
# listing the results store on every tick.
PROGRESS_TTL_S = 30 * DAY


def progress(store_uri: str, run_id: str) -> str:
    """Per results store too: two stores may each hold a run of the same id."""
    return f"{_run(store_uri, run_id)}:finished"


def planned(store_uri: str, run_id: str) -> str:
    """A question-set run's planned questions: question id -> the outcomes it waits for."""
    return f"{_run(store_uri, run_id)}:planned"


def plans(store_uri: str, run_id: str) -> str:
    """A question-set run's question plans (JSON), gathered into the run's files when it ends."""
    return f"{_run(store_uri, run_id)}:plans"


def batch_tick(store_uri: str, run_id: str) -> str:
    """A batch-mode run's tick lock: held by the worker that polls and submits its batches while it
    does, then for one poll interval (PRISM_BATCH_POLL_S)."""
    return f"{_run(store_uri, run_id)}:batch-tick"


# A batch-mode run's claims (workers.batches.BatchClaims): each request on its way into a batch,
# with the submission that holds it and since when; a claim is let go when its batch is taken in,
# or lapses unused. The hash expires this long after its last claim: past a batch's 24 h window.
BATCH_CLAIMS_TTL_S = 3 * DAY


def batch_claims(store_uri: str, run_id: str) -> str:
    return f"{_run(store_uri, run_id)}:batch-claims"


def _run(store_uri: str, run_id: str) -> str:
    store = hashlib.sha256(store_uri.encode()).hexdigest()[:12]
    return f"prism:run:{store}:{run_id}"
