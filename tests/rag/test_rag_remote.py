"""The Qdrant retriever (qdrant-client's in-process local mode): same results as the local index."""
from __future__ import annotations

import pytest

from medqa.rag import build_index, check_leakage, load_retriever
from medqa.rag.remote import QdrantRetriever, parse_url, push_index
from medqa.records import MCQItem, MedQAError

from rag_helpers import DOCS, write_jsonl

qdrant_client = pytest.importorskip("qdrant_client")

QUERIES = ["beta blockers for angina", "how is warfarin reversed with vitamin K", "coronary aneurysm in a child",
           "digoxin toxicity and potassium", "zzzz"]


@pytest.fixture
def local(tmp_path):
    rows = [{"id": k, "text": v} for k, v in DOCS.items()]
    out = tmp_path / "idx"
    index, _ = build_index([write_jsonl(tmp_path / "c.jsonl", rows)], out, embed_model="hashing:256",
                           chunk_words=20, overlap=5)
    return index


def ids(passages):
    return [p.id for p in passages]


def test_qdrant_matches_the_local_index_in_every_mode(local):
    client = qdrant_client.QdrantClient(":memory:")
    assert push_index(local, client, "medqa") == len(local)
    remote = QdrantRetriever(client, "medqa")
    assert len(remote) == len(local)
    for q in QUERIES:
        for mode in ("dense", "bm25", "hybrid"):
            want, got = local.search(q, 4, mode=mode), remote.search(q, 4, mode=mode)
            assert ids(got) == ids(want), (q, mode)
            if mode != "hybrid":  # cosine and BM25 scores agree too (BM25: server-side IDF, same formula)
                assert [p.score for p in got] == pytest.approx([p.score for p in want], rel=1e-4, abs=1e-5)
    assert remote.search(QUERIES[0], 1)[0].source.endswith("c.jsonl")
    # pushing again is idempotent (point ids derive from chunk ids)
    push_index(local, client, "medqa")
    assert len(remote) == len(local)


def test_qdrant_refuses_a_mismatched_query_model(local):
    client = qdrant_client.QdrantClient(":memory:")
    push_index(local, client, "medqa")
    with pytest.raises(MedQAError, match="does not match"):
        QdrantRetriever(client, "medqa", embed_model="hashing:128").search("angina", 1)
    with pytest.raises(MedQAError, match="not available"):
        QdrantRetriever(client, "missing")


def test_qdrant_local_folder_url_and_leakage(local, tmp_path):
    url = f"qdrant+local:{tmp_path / 'qd'}?collection=notes"
    from medqa.rag.remote import connect

    client, coll = connect(url)
    push_index(local, client, coll)
    client.close()
    r = load_retriever(url)
    assert ids(r.search("warfarin reversal", 2)) == ids(local.search("warfarin reversal", 2))
    item = MCQItem(id="leak", question=DOCS["kawasaki"], options=["a", "b"], answer=0)
    report = check_leakage(r, [item])
    assert report.leaked_ids == {"leak"}


def test_parse_url():
    assert parse_url("qdrant://db.example:7000/medqa") == ({"url": "http://db.example:7000"}, "medqa")
    assert parse_url("qdrants://db.example?collection=c")[0] == {"url": "https://db.example:6333"}
    assert parse_url("qdrant+local:/data/q?collection=c") == ({"path": "/data/q"}, "c")
    for bad in ("qdrant://host", "qdrant+local:?collection=c", "redis://x/y"):
        with pytest.raises(MedQAError):
            parse_url(bad)
