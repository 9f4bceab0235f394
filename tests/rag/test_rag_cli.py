"""``medqa index build|add|query|check-leakage|info|push`` end to end (hashing embedder: no model load)."""
from __future__ import annotations

import json

import pytest

from medqa.cli import main

from rag_helpers import DOCS, write_jsonl


def test_index_commands(tmp_path, records_file, capsys):
    out = tmp_path / "idx"
    assert main(["index", "build", str(records_file), "--out", str(out), "--embed-model", "hashing:256",
                 "--chunk-words", "20", "--overlap", "5", "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["counts"]["documents"] == 6 and stats["stats"]["chunks_added"] == stats["counts"]["chunks"]

    assert main(["index", "build", str(records_file), "--out", str(out), "--embed-model", "hashing:256"]) == 2
    assert "already an index" in capsys.readouterr().err

    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "acs.md").write_text("# ACS\nGive aspirin 300 mg chewed at once.\n", encoding="utf-8")
    assert main(["index", "add", str(out), str(notes)]) == 0
    assert "1 new" in capsys.readouterr().out

    assert main(["index", "query", str(out), "chewed aspirin dose", "-k", "2", "--mode", "bm25", "--json"]) == 0
    hits = json.loads(capsys.readouterr().out)
    assert hits[0]["id"] == "notes/acs.md#0" and set(hits[0]) == {"id", "text", "score", "source"}
    assert main(["index", "query", str(out), "warfarin", "-k", "1"]) == 0
    assert "[warfarin#" in capsys.readouterr().out

    evalf = write_jsonl(tmp_path / "dev.jsonl", [
        {"id": "q1", "question": DOCS["digoxin"], "options": ["a", "b"], "answer": 0},
        {"id": "q2", "question": "Which vaccine prevents measles in infants?", "options": ["a", "b"], "answer": 1},
    ])
    assert main(["index", "check-leakage", str(out), str(evalf), "--no-embedding", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["counts"]["leaked"] == 1 and report["matches"][0]["item_id"] == "q1"
    clean = write_jsonl(tmp_path / "clean.jsonl", [
        {"id": "q2", "question": "Which vaccine prevents measles in infants?", "options": ["a", "b"], "answer": 1}])
    assert main(["index", "check-leakage", str(out), str(clean)]) == 0
    assert "0 leaked" in capsys.readouterr().out

    assert main(["index", "info", str(out)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert "probe" not in info["embedding"] and info["counts"]["documents"] == 7

    assert main(["index", "query", str(out), "x", "--embed-model", "hashing:64"]) == 2
    assert "does not match" in capsys.readouterr().err


def test_index_push_to_local_qdrant(tmp_path, records_file, capsys):
    pytest.importorskip("qdrant_client")
    out = tmp_path / "idx"
    assert main(["index", "build", str(records_file), "--out", str(out), "--embed-model", "hashing:256"]) == 0
    url = f"qdrant+local:{tmp_path / 'qd'}?collection=notes"
    assert main(["index", "push", str(out), url]) == 0
    assert "pushed" in capsys.readouterr().out
    assert main(["index", "query", url, "warfarin reversal", "-k", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["id"].startswith("warfarin#")
