import threading

import pytest

from prism.files import atomic_write

WRITERS, ROUNDS, SIZE = 8, 20, 256 * 1024


def test_writers_at_once_never_share_a_temporary_file_and_readers_never_see_half(tmp_path):
    """8 threads write one path 20 times each, every write a different whole content, while a
    reader reads it: every write succeeds, every read is one whole content, nothing is left over."""
    target = tmp_path / "cache" / "entry"
    contents = [bytes([w * ROUNDS + r]) * SIZE for w in range(WRITERS) for r in range(ROUNDS)]
    start, errors, seen = threading.Barrier(WRITERS + 1), [], []
    done = threading.Event()

    def write(w: int) -> None:
        start.wait()
        for r in range(ROUNDS):
            try:
                atomic_write(target, contents[w * ROUNDS + r])
            except Exception as err:  # noqa: BLE001 - reported to the test
                errors.append(err)

    def read() -> None:
        start.wait()
        while not done.is_set():
            try:
                seen.append(target.read_bytes())
            except FileNotFoundError:
                continue  # before the first write lands

    writers = [threading.Thread(target=write, args=(w,)) for w in range(WRITERS)]
    reader = threading.Thread(target=read)
    for t in [*writers, reader]:
        t.start()
    for t in writers:
        t.join()
    done.set()
    reader.join()
    seen.append(target.read_bytes())
    assert errors == []
    assert all(len(data) == SIZE and data == data[:1] * SIZE for data in seen)
    assert [p.name for p in target.parent.iterdir()] == ["entry"]
    assert oct(target.stat().st_mode & 0o777) == "0o644"


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path):
    target = tmp_path / "entry"
    atomic_write(target, b"old")
    with pytest.raises(TypeError):
        atomic_write(target, "not bytes")  # type: ignore[arg-type]
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["entry"]
