"""ModelImageCache: an entry comes back only for its exact key, as a read-only view of the
mapped file, aligned; a truncated, corrupt, foreign or misnamed file is one CacheWarning and
no entry; clear removes every entry."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from polytf.errors import CacheWarning
from polytf.storage.model_images import ALIGNMENT, ModelImageCache

KEY = {"file_sha256": "ab" * 32, "shapes": {"x": [1, 3]}}


def _load_warning(images: ModelImageCache, kind: str, key: dict) -> str | None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert images.load(kind, key) is None
    messages = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
    assert len(messages) <= 1
    return messages[0] if messages else None


def test_an_entry_comes_back_mapped_and_aligned(tmp_path):
    images = ModelImageCache(tmp_path)
    array = np.arange(10, dtype=np.float32)
    images.save("packed", KEY, {"arrays": 1}, [b"x", array.data.cast("B")])
    meta, payload = images.load("packed", KEY)
    assert meta == {"arrays": 1} and payload.readonly
    assert bytes(payload[:1]) == b"x" and np.frombuffer(payload, np.float32, 10, 1).tolist() == array.tolist()
    head = images.path("packed", KEY).read_bytes()
    assert (len(head) - payload.nbytes) % ALIGNMENT == 0
    assert images.load("packed", {**KEY, "shapes": {"x": [2, 3]}}) is None  # another key: another file
    assert images.load("prepared", KEY) is None


@pytest.mark.parametrize(
    ("damage", "words"),
    [
        (lambda data: data[:-3], "truncated"),
        (lambda data: data[:-1] + bytes([data[-1] ^ 1]), "SHA-256 does not match"),
        (lambda data: b"NOT A MODEL" + data[11:], "wrong magic"),
        (lambda data: data[:20], "not terminated"),
    ],
    ids=["truncated", "corrupt", "magic", "header"],
)
def test_a_damaged_entry_is_one_warning(tmp_path, damage, words):
    images = ModelImageCache(tmp_path)
    images.save("prepared", KEY, {}, [b"payload bytes"])
    path = images.path("prepared", KEY)
    path.write_bytes(damage(path.read_bytes()))
    message = _load_warning(images, "prepared", KEY)
    assert message is not None and words in message and str(path) in message


def test_an_entry_copied_under_another_key_is_refused(tmp_path):
    images = ModelImageCache(tmp_path)
    images.save("prepared", KEY, {}, [b"payload"])
    other = {**KEY, "file_sha256": "cd" * 32}
    images.path("prepared", other).write_bytes(images.path("prepared", KEY).read_bytes())
    message = _load_warning(images, "prepared", other)
    assert message is not None and "file_sha256" in message


def test_clear_removes_every_entry(tmp_path):
    images = ModelImageCache(tmp_path)
    images.save("prepared", KEY, {}, [b"a"])
    images.save("packed", KEY, {}, [b"b"])
    assert len(images.entries()) == 2
    assert images.clear() == 2 and images.entries() == []
