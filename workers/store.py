"""Where inputs are read and results written: a local folder or an S3 bucket, laid out alike.

runs/<run_id>/...                                a run's folder: laid out where it is written, workers/runfiles.py
index/results/<job_id>.json                      a job's result, shared by every run that ranks or reuses it
                                                 (result_key): content-addressed, kept while a kept run names it
index/jobs/<job_id>                              the key of a result in a run's folder (written by earlier releases;
                                                 read, and removed once its target is gone)
index/corpora/<corpus>.json                      the last run over a corpus, for --new (last_over_key)
index/prompt_checks/<digest>.json                a model's last system-prompt check (prompt_check_key)
index/vectors/<embedder>/<digest>.npy            a filing version's page vectors (vectors_key)
cache/llm/<key>.json                             the durable LLM response cache

A corpus (filings, their chunk inputs, the catalogue) is laid out in docs/corpus.md.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, BinaryIO, Protocol, TypeVar
from urllib.parse import urlparse

from pydantic import BaseModel

from workers.settings import Settings

M = TypeVar("M", bound=BaseModel)


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(text: str) -> str:
    """A store key part for any id: a readable, shortened slug plus a hash of the whole id."""
    slug = _UNSAFE.sub("_", text)[:48].strip("._-") or "id"
    return f"{slug}-{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def result_key(job_id: str) -> str:
    """A job's result where every later run finds it: the same question, filing version and
    configuration make the same job id, so this outlives the run that ranked it."""
    return f"index/results/{job_id}.json"


def index_key(job_id: str) -> str:
    """Where an earlier release recorded the run-folder key of a job's result."""
    return f"index/jobs/{job_id}"


def prompt_check_key(digest: str) -> str:
    """The last system-prompt check of one (endpoint, model, system prompt): a PromptCheck."""
    return f"index/prompt_checks/{digest}.json"


def vectors_key(embedder: str, digest: str) -> str:
    """A filing version's page vectors by one embedder, shared by every run (content-addressed)."""
    return f"index/vectors/{safe_name(embedder)}/{digest}.npy"


def last_over_key(corpus: str) -> str:
    """The last finished question-set run over this corpus (a LastRun): what `--new` starts from."""
    return f"index/corpora/{safe_name(corpus)}.json"


class Store(Protocol):
    uri: str

    def put(self, key: str, data: bytes, if_absent: bool = False) -> bool:
        """Write; with ``if_absent``, only when nothing is there yet. True when written."""
        ...

    def delete(self, key: str) -> None: ...

    def get(self, key: str) -> bytes: ...  # KeyError when absent

    def exists(self, key: str) -> bool: ...

    def keys(self, prefix: str) -> Iterator[str]: ...

    def folders(self, prefix: str) -> Iterator[str]:  # the names one level under a folder ("runs/")
        ...

    def modified(self, prefix: str) -> Iterator[tuple[str, float]]:  # each key with its last write (epoch s)
        ...

    def delete_many(self, keys: list[str]) -> None: ...

    def stamp(self, key: str) -> str:  # size and modification time or ETag: changes when the object does
        ...

    def open(self, key: str) -> BinaryIO:  # seekable, read as it is read (an S3 object by ranged GETs)
        ...

    def table_location(self, key: str) -> tuple[str, dict[str, str]]:  # a Delta table's URI and storage options
        ...


def put_model(store: Store, key: str, model: BaseModel, if_absent: bool = False) -> bool:
    return store.put(key, model.model_dump_json(indent=1).encode(), if_absent)


def get_model(store: Store, key: str, cls: type[M]) -> M:
    return cls.model_validate_json(store.get(key))


def file_stamp(path: Path) -> str:
    """A file's size and modification time: a change of content changes it (or a touch)."""
    st = path.stat()
    return f"{st.st_size}-{st.st_mtime_ns}"


class LocalStore:
    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        self.uri = str(self.root)

    def put(self, key: str, data: bytes, if_absent: bool = False) -> bool:
        path = self.root / key
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write aside then move into place, so a reader never sees half a file; a hard link
        # fails if the name exists, which makes write-once atomic.
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".tmp-", delete=False) as tmp:
            tmp.write(data)
        os.chmod(tmp.name, 0o644)  # a plain file's usual mode, not the temporary file's 0600
        if not if_absent:
            os.replace(tmp.name, path)
            return True
        try:
            os.link(tmp.name, path)
            return True
        except FileExistsError:
            return False
        finally:
            os.unlink(tmp.name)

    def delete(self, key: str) -> None:
        (self.root / key).unlink(missing_ok=True)

    def get(self, key: str) -> bytes:
        try:
            return (self.root / key).read_bytes()
        except FileNotFoundError:
            raise KeyError(key) from None

    def exists(self, key: str) -> bool:
        return (self.root / key).is_file()

    def stamp(self, key: str) -> str:
        return file_stamp(self.root / key)

    def open(self, key: str) -> BinaryIO:
        try:
            return open(self.root / key, "rb")
        except FileNotFoundError:
            raise KeyError(key) from None

    def keys(self, prefix: str) -> Iterator[str]:
        """Every key that starts with ``prefix`` (a folder's, or any start of a key, as S3 lists)."""
        base = self.root / prefix
        folder = base if base.is_dir() else base.parent
        if not folder.is_dir():
            return
        for path in sorted(folder.rglob("*")):
            key = path.relative_to(self.root).as_posix()
            if path.is_file() and not path.name.startswith(".tmp-") and key.startswith(prefix):
                yield key

    def folders(self, prefix: str) -> Iterator[str]:
        base = self.root / prefix
        if base.is_dir():
            yield from sorted(p.name for p in base.iterdir() if p.is_dir())

    def modified(self, prefix: str) -> Iterator[tuple[str, float]]:
        for key in self.keys(prefix):
            try:
                yield key, (self.root / key).stat().st_mtime
            except FileNotFoundError:
                continue

    def delete_many(self, keys: list[str]) -> None:
        """Delete, then remove the folders that left empty (a removed run leaves no folder behind)."""
        for key in keys:
            self.delete(key)
        for folder in sorted({(self.root / k).parent for k in keys}, key=lambda p: len(p.parts), reverse=True):
            while folder != self.root and folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
                folder = folder.parent

    def table_location(self, key: str) -> tuple[str, dict[str, str]]:
        return str(self.root / key), {}


class S3Store:
    def __init__(self, bucket: str, prefix: str, client):
        self.bucket, self.prefix, self.client = bucket, prefix.strip("/"), client
        self.uri = f"s3://{bucket}/{self.prefix}".rstrip("/")

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if self.prefix else key

    def put(self, key: str, data: bytes, if_absent: bool = False) -> bool:
        extra = {"IfNoneMatch": "*"} if if_absent else {}
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data, **extra)
            return True
        except self.client.exceptions.ClientError as err:
            if if_absent and err.response["Error"]["Code"] in (
                "PreconditionFailed",
                "412",
                "ConditionalRequestConflict",
            ):
                return False
            raise

    def delete(self, key: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._key(key))

    def get(self, key: str) -> bytes:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()
        except self.client.exceptions.NoSuchKey:
            raise KeyError(key) from None

    def exists(self, key: str) -> bool:
        try:
            self.client.head_object(Bucket=self.bucket, Key=self._key(key))
            return True
        except self.client.exceptions.ClientError as err:
            if err.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
                return False
            raise

    def stamp(self, key: str) -> str:
        head = self.client.head_object(Bucket=self.bucket, Key=self._key(key))
        return f"{head['ContentLength']}-{head['ETag'].strip(chr(34))}"

    def open(self, key: str) -> BinaryIO:
        return io.BufferedReader(RangedReader(self.client, self.bucket, self._key(key)), buffer_size=RangedReader.BLOCK)

    def keys(self, prefix: str) -> Iterator[str]:
        strip = len(self.prefix) + 1 if self.prefix else 0
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self._key(prefix)):
            for item in page.get("Contents", []):
                yield item["Key"][strip:]

    def folders(self, prefix: str) -> Iterator[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=self.bucket, Prefix=self._key(prefix), Delimiter="/"
        )
        for page in pages:
            for common in page.get("CommonPrefixes", []):
                yield common["Prefix"].rstrip("/").rsplit("/", 1)[-1]

    def modified(self, prefix: str) -> Iterator[tuple[str, float]]:
        strip = len(self.prefix) + 1 if self.prefix else 0
        for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self._key(prefix)):
            for item in page.get("Contents", []):
                yield item["Key"][strip:], item["LastModified"].timestamp()

    def delete_many(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):  # S3's most in one request
            objects = [{"Key": self._key(k)} for k in keys[start : start + 1000]]
            done = self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True})
            if done.get("Errors"):
                first = done["Errors"][0]
                raise OSError(f"S3 did not delete {first['Key']}: {first.get('Message', first.get('Code'))}")

    def table_location(self, key: str) -> tuple[str, dict[str, str]]:
        """Delta Lake's URI and options for a key: this client's endpoint, region and credentials;
        commits by conditional puts, so concurrent writers need no lock service."""
        meta, credentials = self.client.meta, self.client._get_credentials()
        options = {"AWS_REGION": meta.region_name or "us-east-1", "AWS_CONDITIONAL_PUT": "etag"}
        if meta.endpoint_url and not meta.endpoint_url.startswith("https://s3."):
            options |= {"AWS_ENDPOINT_URL": meta.endpoint_url, "AWS_ALLOW_HTTP": "true"}
        if credentials is not None:
            frozen = credentials.get_frozen_credentials()
            options |= {"AWS_ACCESS_KEY_ID": frozen.access_key, "AWS_SECRET_ACCESS_KEY": frozen.secret_key}
            if frozen.token:
                options["AWS_SESSION_TOKEN"] = frozen.token
        return f"s3://{self.bucket}/{self._key(key)}", options


class RangedReader(io.RawIOBase):
    """An S3 object as a seekable stream: each read a ranged GET of what it needs (a worker reads
    one member of an archive without fetching the rest); ``fetched`` counts the bytes got."""

    BLOCK = 1024 * 1024  # the least a GET asks for: a tar's headers and a gzip stream read on in blocks

    def __init__(self, client, bucket: str, key: str):
        self.client, self.bucket, self.key = client, bucket, key
        try:
            self.size = client.head_object(Bucket=bucket, Key=key)["ContentLength"]
        except client.exceptions.ClientError as err:
            if err.response["Error"]["Code"] in ("404", "NoSuchKey", "NotFound"):
                raise KeyError(key) from None
            raise
        self.position = self.fetched = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.position, io.SEEK_END: self.size}[whence]
        self.position = max(0, base + offset)
        return self.position

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def, override]
        if self.position >= self.size or not len(buffer):
            return 0
        end = min(self.size, self.position + len(buffer)) - 1
        body = self.client.get_object(Bucket=self.bucket, Key=self.key, Range=f"bytes={self.position}-{end}")[
            "Body"
        ].read()
        buffer[: len(body)] = body
        self.position += len(body)
        self.fetched += len(body)
        return len(body)


def open_ranged(uri: str, settings: Settings) -> BinaryIO:
    """A local file or an s3:// object as a seekable stream, read by ranges as it is read."""
    if uri.startswith("s3://"):
        parsed = urlparse(uri)
        return S3Store(parsed.netloc, "", s3_client(settings)).open(parsed.path.lstrip("/"))
    return open(uri, "rb")


def s3_client(settings: Settings):
    import boto3
    from botocore.config import Config

    # Path-style addressing for S3-compatible servers on a plain host:port.
    style = "path" if settings.s3_endpoint_url else "auto"
    config = Config(s3={"addressing_style": style}, retries={"max_attempts": 8, "mode": "standard"})
    return boto3.client(
        "s3", endpoint_url=settings.s3_endpoint_url, region_name=settings.s3_region or "us-east-1", config=config
    )


def open_store(uri: str, settings: Settings) -> Store:
    if uri.startswith("s3://"):
        parsed = urlparse(uri)
        return S3Store(parsed.netloc, parsed.path, s3_client(settings))
    return LocalStore(uri)


def open_input(uri: str, settings: Settings) -> IO[bytes]:
    """A byte stream of a local file or an s3:// object, read as it is consumed."""
    if uri.startswith("s3://"):
        parsed = urlparse(uri)
        return s3_client(settings).get_object(Bucket=parsed.netloc, Key=parsed.path.lstrip("/"))["Body"]
    return open(uri, "rb")
