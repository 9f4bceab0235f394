"""Atomic writes: the result is complete, readable like an ordinary file, and keeps an existing mode."""
import os
import stat

import pytest

from medqa.utils.io import atomic_dir, atomic_write_bytes, atomic_write_json, atomic_write_text


def _mode(p):
    return stat.S_IMODE(os.stat(p).st_mode)


def test_new_file_gets_umask_mode_not_mkstemp_0600(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write_json(tmp_path / "m.json", {"a": 1})
        with atomic_dir(tmp_path / "d") as d:
            (d / "x").write_text("x")
    finally:
        os.umask(old)
    assert _mode(tmp_path / "m.json") == 0o644
    assert _mode(tmp_path / "d") == 0o755
    assert (tmp_path / "m.json").read_text() == '{\n  "a": 1\n}\n'


def test_replacing_keeps_the_existing_mode(tmp_path):
    p = tmp_path / "r.txt"
    p.write_text("old")
    p.chmod(0o640)
    atomic_write_text(p, "new")
    assert p.read_text() == "new" and _mode(p) == 0o640


def test_failed_write_leaves_old_file_and_no_temp(tmp_path):
    p = tmp_path / "keep.json"
    atomic_write_json(p, {"v": 1})
    with pytest.raises(TypeError):  # fails inside the write, after the temp file exists
        atomic_write_bytes(p, "not bytes")  # type: ignore[arg-type]
    assert p.read_text() == '{\n  "v": 1\n}\n'
    assert [x.name for x in tmp_path.iterdir()] == ["keep.json"]
