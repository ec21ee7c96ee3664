import gzip

import pytest

from workers.runfiles import RunLayout
from workers.settings import Settings
from workers.store import LocalStore, open_input, open_store, vectors_key

pytestmark = pytest.mark.integration


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path, monkeypatch):
    if request.param == "local":
        return LocalStore(tmp_path / "results")
    endpoint = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("bucket")
    from tests.conftest import S3_KEYS

    for key, value in S3_KEYS.items():
        monkeypatch.setenv(key, value)
    return open_store(f"s3://{bucket}/some/prefix", Settings(s3_endpoint_url=endpoint))


def test_put_get_list_and_missing_keys(store):
    layout = RunLayout("r1")
    store.put(layout.result("chunks", "q/1 ü"), b'{"a": 1}')
    store.put(layout.result("chunks", "q2"), b'{"a": 2}')
    store.put(layout.file("manifest.json"), b"{}")
    assert store.get(layout.result("chunks", "q/1 ü")) == b'{"a": 1}'
    keys = list(store.keys(f"{layout.base}/results/"))
    assert sorted(keys) == sorted(layout.result("chunks", q) for q in ("q/1 ü", "q2"))
    assert store.exists(layout.file("manifest.json"))
    assert not store.exists(layout.file("cost.json"))
    with pytest.raises(KeyError):
        store.get(layout.file("cost.json"))
    # Same key on a rerun: the write replaces, it does not add.
    store.put(layout.result("chunks", "q2"), b'{"a": 3}')
    assert len(list(store.keys(f"{layout.base}/results/"))) == 2


def test_inputs_read_from_s3_plain_and_gzipped(s3_server, bucket, monkeypatch):
    from tests.conftest import S3_KEYS, s3_client

    for key, value in S3_KEYS.items():
        monkeypatch.setenv(key, value)
    body = b'{"id": "a", "question": "q?", "candidates": ["x", "y"]}\n'
    client = s3_client(s3_server)
    client.put_object(Bucket=bucket, Key="in/plain.jsonl", Body=body)
    client.put_object(Bucket=bucket, Key="in/zipped.jsonl.gz", Body=gzip.compress(body))
    settings = Settings(s3_endpoint_url=s3_server)
    from prism.datasets import read_queries

    for key in ("in/plain.jsonl", "in/zipped.jsonl.gz"):
        with open_input(f"s3://{bucket}/{key}", settings) as stream:
            (query,) = list(read_queries(stream))
        assert query.id == "a" and query.candidates == ["x", "y"]


def test_write_once_keeps_the_first_write(store):
    key = RunLayout("r2").result("documents", "q")
    assert store.put(key, b"first", if_absent=True)
    assert not store.put(key, b"second", if_absent=True)
    assert store.get(key) == b"first"
    store.delete(key)
    assert not store.exists(key)
    assert store.put(key, b"third", if_absent=True) and store.get(key) == b"third"


def test_page_vectors_round_trip_and_a_damaged_file_is_made_again(store):
    import numpy as np

    from workers.vectors import StoreVectors

    vectors = StoreVectors(lambda: store)
    assert vectors.get("minilm", "abc") is None
    saved = np.arange(12, dtype=np.float32).reshape(3, 4)
    vectors.put("minilm", "abc", saved)
    assert np.array_equal(vectors.get("minilm", "abc"), saved)
    assert vectors.get("wordllama", "abc") is None  # each embedder its own vectors
    store.put(vectors_key("minilm", "bad"), b"not an array")
    assert vectors.get("minilm", "bad") is None
