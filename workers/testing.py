"""Fleet parts for tests and benchmarks: an S3 server (SeaweedFS) and `celery worker`
processes on loopback, started and stopped by the caller."""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import redis

from prism.options import RunOptions
from workers import keys

ROOT = Path(__file__).resolve().parent.parent
S3_KEYS = {
    "AWS_ACCESS_KEY_ID": "prism-test-key",
    "AWS_SECRET_ACCESS_KEY": "prism-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def free_port_pair() -> int:
    """A free port p with p + 10000 free too (SeaweedFS puts its gRPC port there)."""
    rng = random.Random()
    while True:
        port = rng.randint(20000, 29999)
        try:
            for p in (port, port + 10000):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return port
        except OSError:
            continue


def _stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


class SeaweedS3:
    """SeaweedFS `weed mini` on loopback with auth on (S3_KEYS); ``endpoint`` is its S3 URL."""

    def __init__(self, workdir: Path):
        weed = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
        for sub in ("data", "logs"):
            (workdir / sub).mkdir(parents=True, exist_ok=True)
        port = free_port_pair()
        self.endpoint = f"http://127.0.0.1:{port}"
        self.log = workdir / "weed.log"
        self.cmd = [
            weed,
            f"-logdir={workdir / 'logs'}",
            "mini",
            f"-dir={workdir / 'data'}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-s3.port={port}",
            "-webdav=false",
            "-admin.ui=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            f"-master.port={free_port_pair()}",
            f"-volume.port={free_port_pair()}",
            f"-filer.port={free_port_pair()}",
            f"-admin.port={free_port_pair()}",
            "-master.telemetry=false",
        ]
        self.start()

    @classmethod
    def running(cls, endpoint: str) -> SeaweedS3:
        """One already running (a CI lane's, shared by its benchmarks): not started or stopped here."""
        server = cls.__new__(cls)
        server.endpoint, server.proc = endpoint, None  # type: ignore[assignment]
        return server

    def start(self) -> None:
        """Start (again, on the same ports and data) and wait until S3 answers."""
        self.proc = subprocess.Popen(
            self.cmd,
            env=os.environ | S3_KEYS,
            stdout=open(self.log, "ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                self.client().list_buckets()
                return
            except Exception:  # noqa: BLE001 - not up yet
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"SeaweedFS did not start:\n{self.log.read_text()[-2000:]}") from None
                time.sleep(0.3)

    def client(self):
        return s3_client(self.endpoint)

    def bucket(self) -> str:
        name = f"prism-{uuid.uuid4().hex[:12]}"
        self.client().create_bucket(Bucket=name)
        return name

    def stop(self) -> None:
        if self.proc is not None:  # None: one already running, not ours to stop
            _stop(self.proc, timeout=15)


class RedisServer:
    """A redis-server of our own on a free port, keeping nothing on disk (as on these machines),
    for tests that stop and restart the broker."""

    def __init__(self, workdir: Path):
        self.port = free_port_pair()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.workdir = workdir
        workdir.mkdir(parents=True, exist_ok=True)
        self.start()

    def start(self) -> None:
        cmd = [
            "redis-server",
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.workdir),
        ]
        self.proc = subprocess.Popen(
            cmd, stdout=open(self.workdir / "redis.log", "ab"), stderr=subprocess.STDOUT, start_new_session=True
        )
        import redis

        deadline = time.monotonic() + 20
        while True:
            try:
                redis.Redis(port=self.port).ping()
                return
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.1)

    def stop(self) -> None:
        _stop(self.proc, signal.SIGKILL, timeout=10)


def s3_client(endpoint: str):
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=S3_KEYS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=S3_KEYS["AWS_SECRET_ACCESS_KEY"],
        config=Config(s3={"addressing_style": "path"}),
    )


def fleet_env(redis_url: str | None, s3_endpoint: str | None, llm_url: str | None, **extra: str) -> dict[str, str]:
    """This process's environment without PRISM_/OPENAI_ settings, pointed at the given parts.
    With an LLM, documents go to it alone (PRISM_DOC_RANKER=llm) unless ``extra`` says otherwise:
    tests and benchmarks of the fleet measure the LLM path. The simulator stands for a hosted
    provider there (many requests at once, a large context), so it gets no concurrency cap and the
    default segment budget unless ``extra`` says otherwise: a loopback URL is otherwise taken for a
    server a team runs."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRISM_", "OPENAI_"))}
    env |= S3_KEYS | {"PYTHONUNBUFFERED": "1"}
    if redis_url:
        env["PRISM_BROKER_URL"] = redis_url
    if s3_endpoint:
        env["PRISM_S3_ENDPOINT_URL"] = s3_endpoint
    if llm_url:
        env |= {
            "PRISM_LLM_BASE_URL": llm_url,
            "PRISM_LLM_API_KEY": "sk-test",
            "PRISM_LLM_BACKOFF_CAP_S": "2",
            "PRISM_DOC_RANKER": "llm",
            "PRISM_LLM_CONCURRENCY": '{"*": 0}',
            "PRISM_SEGMENT_TOKENS": str(RunOptions.model_fields["segment_tokens"].default),
        }
    return env | extra


class WorkerProcess:
    """A real `celery -A workers.app worker` (prefork) process, ready when constructed."""

    def __init__(self, env: dict[str, str], log: Path, concurrency: int = 2, pool: str = "prefork"):
        self.log = log
        cmd = [
            str(Path(sys.executable).parent / "celery"),
            "-A",
            "workers.app",
            "worker",
            "-P",
            pool,
            "-c",
            str(concurrency),
            "-n",
            f"w{uuid.uuid4().hex[:6]}@%h",
            "--without-gossip",
            "--without-mingle",
            "-l",
            "INFO",
        ]
        self.proc = subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + 60
        while b" ready." not in log.read_bytes():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"celery worker did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
        _stop(self.proc, sig, timeout)


def queued(client: redis.Redis) -> int:
    """Messages waiting on a Redis broker, at every priority."""
    return sum(client.llen(name) for name in keys.queue_lists())


def drop_queue(client: redis.Redis) -> None:
    """Lose every waiting message, as a broker that forgot them would."""
    client.delete(*keys.queue_lists())


def prism_cli(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(sys.executable).parent / "prism"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
