"""Real services for the tests: Redis on 127.0.0.1:6379 (a DB index of our own, emptied before
and after), an S3 server (SeaweedFS) on loopback, the provider simulator over HTTP, and real
`celery worker` processes."""

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

import pytest
import redis

from prism.datasets import read_queries
from prism.models import Query
from prism.testing.simulator import Simulator, SimulatorConfig

ROOT = Path(__file__).resolve().parent.parent
SHARED = Path(os.environ.get("PRISM_SHARED_DATA", ROOT.parent / "shared" / "data"))
DOC_DEV = SHARED / "finagentbench" / "document_ranking_kaggle_dev.jsonl"
DOC_FULL = SHARED / "finagentbench" / "document_ranking_kaggle_dev_full.jsonl"
PAGES = SHARED / "financebench" / "financebench_page_ranking.jsonl.gz"
REDIS_DB = int(os.environ.get("PRISM_TEST_REDIS_DB", "11"))
S3_KEYS = {"AWS_ACCESS_KEY_ID": "prism-test-key", "AWS_SECRET_ACCESS_KEY": "prism-test-secret", "AWS_DEFAULT_REGION": "us-east-1"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


def load(path: Path, limit: int | None = None) -> list[Query]:
    out = []
    with open(path, "rb") as stream:
        for q in read_queries(stream):
            if isinstance(q, Query):
                out.append(q)
                if limit and len(out) >= limit:
                    break
    return out


@pytest.fixture(scope="session")
def redis_url() -> str:
    url = f"redis://127.0.0.1:6379/{REDIS_DB}"
    client = redis.Redis.from_url(url)
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.fail("Redis is not answering on 127.0.0.1:6379; start it (see .ci/run)")
    client.flushdb()
    yield url
    client.flushdb()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """SeaweedFS `weed mini` with auth on; yields its endpoint URL."""
    weed = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    base = tmp_path_factory.mktemp("seaweed")
    (base / "data").mkdir()
    (base / "logs").mkdir()
    port = free_port_pair()
    env = os.environ | S3_KEYS
    cmd = [
        weed, f"-logdir={base / 'logs'}", "mini", f"-dir={base / 'data'}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
        f"-s3.port={port}", "-webdav=false", "-admin.ui=false", "-s3.port.iceberg=0", "-s3.port.lance=0",
        f"-master.port={free_port_pair()}", f"-volume.port={free_port_pair()}", f"-filer.port={free_port_pair()}",
        f"-admin.port={free_port_pair()}", "-master.telemetry=false",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=open(base / "stdout.log", "wb"), stderr=subprocess.STDOUT, start_new_session=True)
    endpoint = f"http://127.0.0.1:{port}"
    client = s3_client(endpoint)
    deadline = time.monotonic() + 60
    while True:
        try:
            client.list_buckets()
            break
        except Exception:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                pytest.fail(f"SeaweedFS did not start: {(base / 'stdout.log').read_text()[-2000:]}")
            time.sleep(0.3)
    yield endpoint
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)


def s3_client(endpoint: str):
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=S3_KEYS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=S3_KEYS["AWS_SECRET_ACCESS_KEY"], config=Config(s3={"addressing_style": "path"}),
    )  # fmt: skip


@pytest.fixture()
def bucket(s3_server) -> str:
    name = f"prism-{uuid.uuid4().hex[:12]}"
    s3_client(s3_server).create_bucket(Bucket=name)
    return name


@pytest.fixture(scope="module")
def simulator():
    with Simulator(SimulatorConfig(mode="oracle")) as sim:
        sim.add_queries(load(DOC_DEV))
        sim.add_queries(load(PAGES, limit=12))
        yield sim


@pytest.fixture()
def fresh_simulator(simulator):
    """The module's simulator, reset to the oracle mode with no noise and no faults."""
    simulator.config = SimulatorConfig(mode="oracle")
    simulator._script.clear()
    return simulator


def fleet_env(redis_url: str, s3_endpoint: str, llm_url: str | None, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PRISM_", "OPENAI_"))}
    env |= S3_KEYS | {"PRISM_BROKER_URL": redis_url, "PRISM_S3_ENDPOINT_URL": s3_endpoint, "PYTHONUNBUFFERED": "1"}
    if llm_url:
        env |= {"PRISM_LLM_BASE_URL": llm_url, "PRISM_LLM_API_KEY": "sk-test", "PRISM_LLM_BACKOFF_CAP_S": "2"}
    return env | extra


class WorkerProcess:
    """A real `celery -A workers.app worker` process."""

    def __init__(self, env: dict[str, str], log: Path, concurrency: int = 2, name: str | None = None):
        self.log = log
        name = name or f"w{uuid.uuid4().hex[:6]}"
        cmd = [
            str(Path(sys.executable).parent / "celery"), "-A", "workers.app", "worker", "-P", "prefork",
            "-c", str(concurrency), "-n", f"{name}@%h", "--without-gossip", "--without-mingle", "-l", "INFO",
        ]  # fmt: skip
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 60
        while b" ready." not in log.read_bytes():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"celery worker did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@pytest.fixture()
def start_worker(tmp_path):
    started: list[WorkerProcess] = []

    def start(env: dict[str, str], concurrency: int = 2) -> WorkerProcess:
        worker = WorkerProcess(env, tmp_path / f"worker-{len(started)}.log", concurrency)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()


def prism_cli(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(Path(sys.executable).parent / "prism"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
