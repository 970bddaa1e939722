"""The user's sealing key and the seal of state memora hands to a later run of itself."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from memora.errors import MemoraError
from memora.security.seal import KEY_FILE, seal, unseal, user_key


def test_one_private_key_per_user_folder_even_when_made_at_once(tmp_path: Path) -> None:
    keys: list[bytes] = []
    threads = [
        threading.Thread(target=lambda: keys.append(user_key(tmp_path / "u"))) for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(keys)) == 1 and len(keys[0]) == 32
    assert (tmp_path / "u" / KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in (tmp_path / "u").iterdir()) == [KEY_FILE]  # no temp file left
    assert user_key(tmp_path / "u") == keys[0]
    assert user_key(tmp_path / "other") != keys[0]


def test_a_seal_holds_for_the_same_data_only(tmp_path: Path) -> None:
    key, other = user_key(tmp_path / "a"), user_key(tmp_path / "b")
    data = {"call": {"name": "run_command", "args": {"command": "ls 目录"}}, "n": [1, 2.5]}
    doc = seal(data, key)
    again = json.loads(json.dumps(doc, indent=4))  # re-indented: still the same data
    assert unseal(again, key) == data
    assert unseal(doc, other) is None
    changed = json.loads(json.dumps(doc).replace("ls", "rm"))
    assert unseal(changed, key) is None
    for bad in (data, None, [], {"sealed": data}, {"sealed": data, "mac": "é" * 64}):
        assert unseal(bad, key) is None


def test_a_key_file_of_the_wrong_size_is_named(tmp_path: Path) -> None:
    (tmp_path / KEY_FILE).write_bytes(b"short")
    with pytest.raises(MemoraError, match=f"{KEY_FILE} is not a memora key"):
        user_key(tmp_path)
