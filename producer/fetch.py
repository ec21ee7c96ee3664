"""`prism fetch`: the filings EDGAR's indexes list for some days, those a selection takes,
downloaded into a target (a folder or an s3:// prefix) as their complete submissions, one fleet
task per filing (in this process when no broker is configured).

The days' rows come from the daily index of each day (one day, or ``--since last``) or from
the full index of each quarter the dates span, filtered by the date filed. A filing already in
the target is not asked for again, so a fetch cut short resumes where it stopped. The target
keeps a record of each day (``.prism-fetch/days/YYYY-MM-DD.json``): done when every filing it
took is there, or when EDGAR has no index for it (a day without filings); ``--since last``
starts after the last done day, or at the first day not done."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from pydantic import BaseModel

from prism.corpus.edgar import (
    EdgarIndexError,
    IndexRow,
    archive_path,
    daily_index,
    days,
    full_index,
    parse_index,
    quarter,
    quarters,
    saved_as,
)
from prism.corpus.filters import Candidate
from producer.archives import Filter
from producer.collect import run_tasks
from producer.spec import RunError
from workers import runtime
from workers.app import make_app, reach_broker
from workers.edgar import Edgar, EdgarError, EdgarMissing, EdgarPaused
from workers.embedded import embedded_worker
from workers.messages import Fetched, FetchJob, TaskName
from workers.settings import Settings, named
from workers.store import Store, open_store

RECORDS = ".prism-fetch/days/"  # hidden: an ingest of the target does not read them


class DayRecord(BaseModel):
    day: date
    selection: str  # what was taken (forms, CIKs, companies): a day is done for one selection
    done: bool
    index: str  # "daily", "full", or "none" (EDGAR has no index for it: no filings that day)
    filings: int = 0  # taken
    fetched: int = 0
    present: int = 0
    failed: dict[str, str] = {}  # key under the target -> why
    at: datetime


class FetchSummary(BaseModel):
    since: date
    until: date
    listed: int = 0  # rows of the indexes for those days
    taken: int = 0
    present: int = 0  # already in the target: not asked for
    fetched: int = 0
    bytes: int = 0
    failed: dict[str, str] = {}  # a filing's key (or an index's path) -> why
    days_done: list[date] = []
    days_waiting: list[date] = []  # today's (or a later day's) index is not published yet
    requests: int = 0  # of the producer: index files
    seconds: float = 0.0


@dataclass
class Plan:
    days: list[date]
    rows: list[IndexRow] = field(default_factory=list)  # those the selection takes
    listed: int = 0  # rows of the days, before the selection
    index: dict[date, str] = field(default_factory=dict)  # day -> the index read for it ("none": a 404)
    failed: dict[str, str] = field(default_factory=dict)  # an index that could not be had -> why


def fetch(
    target: str,
    settings: Settings,
    since: date | None,
    until: date | None,
    chosen: Filter,
    on_progress: Callable[[int, int], None] = lambda done, total: None,
    on_note: Callable[[str], None] = lambda text: None,
) -> FetchSummary:
    """Fetch the days' filings that ``chosen`` takes into ``target``; ``since`` None: after the
    last done day."""
    require_agent(settings)
    started, store = time.perf_counter(), open_store(target, settings)
    today = datetime.now(UTC).date()
    first = since or since_last(store, chosen.key, target)
    last = until or today
    if last < first:
        raise RunError(f"--until {last}: before --since {first}")
    app = make_app(settings, tasks=("tasks.fetch",))
    if not settings.embedded:
        reach_broker(app)
    with embedded_worker(app, settings.embedded_workers) if settings.embedded else nullcontext():
        edgar = runtime.of(app).edgar
        single = since is None or first == last  # the daily indexes; a range reads the quarters'
        plan = plan_days(edgar, first, last, single, chosen, on_note)
        summary = FetchSummary(since=first, until=last, failed=dict(plan.failed), requests=edgar.requests)
        outcomes = list(_fetched(app, store, target, plan, settings, summary, on_progress, on_note))
    _record_days(store, plan, outcomes, chosen.key, today, summary)
    summary.seconds = round(time.perf_counter() - started, 3)
    return summary


def require_agent(settings: Settings) -> None:
    if not settings.sec_user_agent:
        raise RunError(
            f"{named('sec_user_agent')}: not set; SEC asks every client to say who it is: 'Acme Data ops@acme.com'"
        )


def since_last(store: Store, selection: str, target: str) -> date:
    """The first day after the last done one, or the first day not done (its filings are retried)."""
    records = [r for r in _records(store) if r.selection == selection]
    if not records:
        raise RunError(
            f"--since last: no fetch of these filings into {target} yet; give --since YYYY-MM-DD for the first"
        )
    undone = [r.day for r in records if not r.done]
    done = [r.day for r in records if r.done]
    return min([*undone, *([max(done) + timedelta(days=1)] if done else [])])


def _records(store: Store) -> Iterator[DayRecord]:
    for key in store.keys(RECORDS):
        yield DayRecord.model_validate_json(store.get(key))


def plan_days(
    edgar: Edgar, first: date, last: date, single: bool, chosen: Filter, on_note: Callable[[str], None]
) -> Plan:
    """The rows of the days' indexes that the selection takes. A day whose index could not be
    had is left out of ``plan.index`` (not done); a day whose daily index is a 404 is "none"."""
    plan = Plan(days(first, last))
    rows: list[IndexRow] = []
    if single:
        for day in plan.days:
            found = _index(edgar, daily_index(day), plan, on_note)
            if found is not None:
                rows += found
                plan.index[day] = "daily" if found is not _MISSING else "none"
    else:
        for year, qtr in quarters(first, last):
            found = _index(edgar, full_index(year, qtr), plan, on_note)
            if found is _MISSING:
                plan.failed[full_index(year, qtr)] = "EDGAR has no full index there"
            elif found is not None:
                rows += [r for r in found if first <= r.filed <= last]
                plan.index.update({d: "full" for d in plan.days if (d.year, quarter(d)) == (year, qtr)})
    plan.listed = len(rows)
    keep = chosen.selection.taken(Candidate(r.path, r.form, r.cik, r.company) for r in rows)
    plan.rows = [r for r in rows if r.path in keep]
    return plan


_MISSING: list[IndexRow] = []  # an index EDGAR does not have (a 404)


def _index(edgar: Edgar, path: str, plan: Plan, on_note: Callable[[str], None]) -> list[IndexRow] | None:
    """An index's rows; _MISSING on a 404; None when it could not be had (a failure)."""
    waited = False
    while True:
        try:
            text = edgar.get(path).decode("latin-1")
            return parse_index(text, f"{edgar.settings.edgar_url.rstrip('/')}{path}")
        except EdgarPaused as err:
            if not waited:
                on_note(f"{err}; the fetch waits until EDGAR answers")
            waited = True
            time.sleep(err.wait_s)
        except EdgarMissing:
            return _MISSING
        except (EdgarError, EdgarIndexError) as err:
            plan.failed[path] = str(err)
            return None


def _fetched(
    app,
    store: Store,
    target: str,
    plan: Plan,
    settings: Settings,
    summary: FetchSummary,
    on_progress: Callable[[int, int], None],
    on_note: Callable[[str], None],
) -> Iterator[Fetched]:
    """Each taken filing's outcome: those in the target without a task, the others by the fleet."""
    summary.listed, summary.taken = plan.listed, len(plan.rows)
    jobs = []
    for row in plan.rows:
        key = saved_as(row)
        if store.exists(key):
            summary.present += 1
            yield Fetched(key=key, day=row.filed, status="present")
        else:
            jobs.append(FetchJob(target=target, path=archive_path(row), key=key, day=row.filed))
    stalled = f"no fetch task has ended for {settings.stall_s:.0f} s ({named('stall_s')}): are workers running (celery -A workers.app worker)?"
    said: set[str] = set()

    def paused() -> None:
        outage = runtime.of(app).circuits.outage(runtime.of(app).edgar.name)
        if outage is not None and outage.error not in said:
            said.add(outage.error)
            on_note(
                f"EDGAR refused for the rate ({outage.error}): fetches pause {settings.edgar_pause_s:.0f} s, then one tries again"
            )

    for job, value in run_tasks(
        app, TaskName.FETCH_FILING, jobs, settings.stall_s, on_progress, lambda: on_note(stalled), paused
    ):
        if isinstance(value, BaseException):
            outcome = Fetched(key=job.key, day=job.day, status="failed", reason=f"{type(value).__name__}: {value}")
        else:
            outcome = Fetched.model_validate(value)
        summary.fetched += outcome.status == "fetched"
        summary.present += outcome.status == "present"
        summary.bytes += outcome.bytes
        if outcome.status == "failed":
            summary.failed[outcome.key] = outcome.reason or ""
        yield outcome


def _record_days(
    store: Store, plan: Plan, outcomes: list[Fetched], selection: str, today: date, summary: FetchSummary
) -> None:
    """Each day's record: done when all its filings are there, or when it had no index (past days only)."""
    by_day: dict[date, list[Fetched]] = {}
    for outcome in outcomes:
        by_day.setdefault(outcome.day, []).append(outcome)
    for day in plan.days:
        index = plan.index.get(day)
        if index is None:
            continue  # its index could not be had: not done
        if index == "none" and day >= today:
            summary.days_waiting.append(day)  # not published yet: no filings cannot be known
            continue
        found = by_day.get(day, [])
        failed = {o.key: o.reason or "" for o in found if o.status == "failed"}
        record = DayRecord(
            day=day,
            selection=selection,
            done=not failed,
            index=index,
            filings=len(found),
            fetched=sum(o.status == "fetched" for o in found),
            present=sum(o.status == "present" for o in found),
            failed=failed,
            at=datetime.now(UTC),
        )
        store.put(f"{RECORDS}{day.isoformat()}.json", json.dumps(record.model_dump(mode="json"), indent=1).encode())
        if record.done:
            summary.days_done.append(day)
