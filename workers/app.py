"""The Celery app. ``celery -A workers.app worker`` starts a fleet worker from ``PRISM_*``
settings; the producer makes its own app with the same tasks (and an in-memory broker when no
broker is configured: the embedded default)."""

from __future__ import annotations

from celery import Celery
from celery.result import AsyncResult
from celery.signals import celeryd_init, worker_process_init, worker_ready
from pydantic import BaseModel

from workers import keys, logs
from workers.embedded import BROKER_URL, RESULT_BACKEND
from workers.messages import Priority
from workers.settings import Settings, SettingsProblem, load_settings

TASK_MODULES = ("tasks.ranking", "tasks.planning", "tasks.ingest", "tasks.fetch")


def make_app(settings: Settings | None = None, tasks: tuple[str, ...] = TASK_MODULES) -> Celery:
    """The fleet's Celery app; ``tasks``: the task modules a worker of this app loads (an
    embedded ingest needs only its own, and starts sooner without the rankers')."""
    if settings is None:
        try:
            settings = load_settings()
        except SettingsProblem as err:  # a worker that cannot start says why in one line
            raise SystemExit(f"prism worker: {err}") from None
    broker = settings.broker_url or BROKER_URL
    backend = settings.result_backend or settings.broker_url or RESULT_BACKEND
    app = Celery("prism", broker=broker, backend=backend, include=list(tasks))
    app.conf.update(
        # A job is acknowledged only once its result is stored; a worker that dies mid-job
        # leaves it to be delivered again, to another worker.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        broker_transport_options={
            "visibility_timeout": settings.visibility_timeout_s,
            # Priority lists read "celery:3", "celery:6" (workers.keys.queue_lists) for KEDA and the exporter.
            "sep": keys.PRIORITY_SEP,
            "priority_steps": list(keys.PRIORITY_STEPS),
        },
        # New work waits behind a started question's next steps (workers.messages.Priority).
        task_default_priority=Priority.NEW_WORK,
        result_backend_transport_options={"visibility_timeout": settings.visibility_timeout_s},
        task_time_limit=settings.task_time_limit_s,
        task_soft_time_limit=settings.task_time_limit_s - 60,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        result_expires=7 * 24 * 3600,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        worker_send_task_events=True,
        task_send_sent_event=True,
    )
    app.prism_settings = settings
    return app


def send(app: Celery, task: str, message: BaseModel, priority: Priority | None = None) -> AsyncResult:
    """Enqueue a task by its name (workers.messages.TaskName): the sender imports none of its code.
    Celery's events and logs name the message by its type and job id: written out whole by
    Celery (its ``argsrepr``), a question's message took half the time of enqueueing it."""
    named = f"({type(message).__name__} {getattr(message, 'job_id', '')})"
    args = [message.model_dump(mode="json")]
    return app.send_task(task, args=args, priority=None if priority is None else int(priority), argsrepr=named)


def reach_broker(app: Celery) -> None:
    """Says in one line, at once, that no broker answers at PRISM_BROKER_URL, where a first
    message would be retried for ~20 s and end in an error that names neither."""
    from kombu.exceptions import OperationalError

    try:
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=0)
    except OperationalError as err:
        url = app.prism_settings.masked()["broker_url"]
        raise SettingsProblem(f"PRISM_BROKER_URL={url}: no broker answers there ({err})") from None


def __getattr__(name: str) -> Celery:
    """``celery -A workers.app`` reads ``app``: built on first use, so importing this module
    (the producer does) never reads settings."""
    if name == "app":
        globals()["app"] = made = make_app()
        return made
    raise AttributeError(name)


@celeryd_init.connect
def _check_fleet(instance=None, **_):
    settings: Settings = instance.app.prism_settings
    if settings.embedded:
        raise SystemExit(
            "PRISM_BROKER_URL is not set: a fleet worker needs the broker the producer uses (e.g. redis://host:6379/0)"
        )
    logs.configure(settings.log_level)
    logs.get().info("worker settings", settings=settings.masked())


@worker_ready.connect
def _ready(sender=None, **_):
    """One line a person sees at the default log level once the worker takes jobs."""
    settings: Settings = sender.app.prism_settings
    queues = ", ".join(keys.queue_lists())
    logs.get().info(
        "worker ready",
        hostname=sender.hostname,
        concurrency=sender.controller.concurrency,
        queues=queues,
        results=settings.results,
    )


@worker_process_init.connect
def _child_logging(**_):
    from celery import current_app

    logs.configure(current_app.prism_settings.log_level)
