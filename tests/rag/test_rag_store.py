"""The local index: build, reload (also in a fresh process), incremental add, manifest checks, atomic saves."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from medqa.rag import Passage, Retriever, build_index, load_retriever
from medqa.rag.corpus import Document
from medqa.rag.embed import Embedder, HashingEmbedder, load_embedder
from medqa.rag.store import LocalIndex, add_to_index
from medqa.records import MedQAError

from rag_helpers import DOCS, write_jsonl

QUERIES = ["beta blockers for angina", "how is warfarin reversed", "coronary aneurysm in a child", "zzzz"]


def results(r, mode):
    return [[(p.id, round(p.score, 6)) for p in r.search(q, 3, mode=mode)] for q in QUERIES]


@pytest.fixture
def index_dir(tmp_path, records_file):
    out = tmp_path / "idx"
    build_index([records_file], out, embed_model="hashing:256", chunk_words=20, overlap=5)
    return out


def test_build_writes_manifest_and_passages(index_dir):
    m = json.loads((index_dir / "manifest.json").read_text())
    assert m["format"] == "medqa-rag-index" and m["version"] == 1
    assert m["embedding"]["spec"] == "hashing:256" and m["embedding"]["dim"] == 256 and len(m["embedding"]["probe"]) == 256
    assert m["chunking"] == {"method": "sentence-window", "version": 1, "chunk_words": 20, "overlap": 5}
    assert m["counts"]["documents"] == 6 and m["counts"]["chunks"] > 6
    assert m["bm25"]["library"] == "bm25s" and m["dense"]["index"] == "IndexFlatIP"
    r = load_retriever(index_dir)
    assert isinstance(r, Retriever)
    hits = r.search("How is warfarin reversed?", k=2)
    assert len(hits) == 2 and all(isinstance(p, Passage) for p in hits)
    assert hits[0].id.startswith("warfarin#") and hits[0].source.endswith("notes.jsonl")
    assert hits[0].score >= hits[1].score
    with pytest.raises(AttributeError):
        hits[0].score = 1.0  # frozen


def test_reload_gives_identical_results_in_every_mode(index_dir):
    built = LocalIndex.load(index_dir)
    before = {mode: results(built, mode) for mode in ("hybrid", "dense", "bm25")}
    assert before["bm25"][-1] == [] and len(before["dense"][-1]) == 3  # unknown word: no lexical hit
    again = LocalIndex.load(index_dir)
    assert {mode: results(again, mode) for mode in before} == before


def test_reload_after_process_restart_is_identical(index_dir):
    here = {mode: results(LocalIndex.load(index_dir), mode) for mode in ("hybrid", "dense", "bm25")}
    code = textwrap.dedent(f"""
        import json
        from medqa.rag import load_retriever
        r = load_retriever({str(index_dir)!r})
        print(json.dumps({{m: [[(p.id, round(p.score, 6)) for p in r.search(q, 3, mode=m)] for q in {QUERIES!r}]
                          for m in ("hybrid", "dense", "bm25")}}))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    there = {m: [[tuple(x) for x in q] for q in v] for m, v in json.loads(out.splitlines()[-1]).items()}
    assert there == here


def test_minilm_index_reload_is_identical(tmp_path, records_file, minilm):
    out = tmp_path / "mini"
    index, _ = build_index([records_file], out, embed_model="embedded", chunk_words=20, overlap=5)
    before = results(index, "hybrid") + results(index, "dense")
    load_embedder.cache_clear()  # a fresh model object, as after a restart
    again = load_retriever(out)
    assert results(again, "hybrid") + results(again, "dense") == before
    assert again.search("first-line drug for angina prevention", 1, mode="dense")[0].id.startswith("angina#")


def test_incremental_add_is_idempotent_and_replaces_changed_documents(tmp_path, index_dir):
    base = LocalIndex.load(index_dir)
    n0, ids0 = len(base), [c.id for c in base.chunks]
    _, st = add_to_index(index_dir, [write_jsonl(tmp_path / "same.jsonl", [{"id": k, "text": v} for k, v in DOCS.items()])])
    assert (st.added, st.unchanged, st.chunks_added) == (0, 6, 0)
    assert [c.id for c in LocalIndex.load(index_dir).chunks] == ids0
    new = write_jsonl(tmp_path / "new.jsonl", [
        {"id": "statin", "text": "Statins inhibit HMG-CoA reductase and can cause myopathy."},
        {"id": "warfarin", "text": "Warfarin is reversed with vitamin K."},
    ])
    index, st = add_to_index(index_dir, [new])
    assert (st.added, st.replaced, st.unchanged) == (1, 1, 0)
    assert st.chunks_removed == sum(c.doc_id == "warfarin" for c in base.chunks) and st.chunks_added == 2
    again = LocalIndex.load(index_dir)
    assert len(again) == n0 - st.chunks_removed + 2 == again.dense.ntotal
    assert [c.text for c in again.chunks if c.doc_id == "warfarin"] == ["Warfarin is reversed with vitamin K."]
    assert again.search("HMG-CoA reductase", 1)[0].id == "statin#0"
    # the vectors still line up with their chunks after the removal
    vecs = again.vectors()
    emb = again.embedder.encode([c.text for c in again.chunks])
    np.testing.assert_allclose(vecs, emb, atol=1e-6)
    m = again.manifest
    assert m["counts"] == {"documents": 7, "chunks": len(again)} and len(m["sources"]) == 3


class ShuffledEmbedder(Embedder):
    """Same dimension as hashing:256, different vectors: must be refused by the probe check."""

    def __init__(self):
        self.spec, self.name, self.dim = "shuffled", "shuffled", 256
        self._h = HashingEmbedder(256)

    def _encode(self, texts, batch_size):
        return self._h._encode(texts, batch_size)[:, ::-1].copy()


def test_mismatched_query_model_is_refused(index_dir, records_file):
    with pytest.raises(MedQAError, match="dimension 128 differs"):
        load_retriever(index_dir, embed_model="hashing:128")
    index = LocalIndex.load(index_dir)
    with pytest.raises(MedQAError, match="does not match.*probe cosine"):
        index._checked_embedder(ShuffledEmbedder())
    with pytest.raises(MedQAError, match="does not match"):
        add_to_index(index_dir, [records_file], embed_model="hashing:64")
    assert load_retriever(index_dir, embed_model="hashing:256").search("angina", 1)  # the same model is fine


def test_build_refuses_existing_folder_and_bad_folders(tmp_path, index_dir, records_file):
    with pytest.raises(MedQAError, match="already an index"):
        build_index([records_file], index_dir, embed_model="hashing:256")
    build_index([records_file], index_dir, embed_model="hashing:256", overwrite=True)
    with pytest.raises(MedQAError, match="not a RAG index folder"):
        load_retriever(tmp_path / "nowhere")
    m = json.loads((index_dir / "manifest.json").read_text())
    m["counts"]["chunks"] += 1
    (index_dir / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(MedQAError, match="inconsistent index"):
        load_retriever(index_dir)
    m["version"] = 99
    (index_dir / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(MedQAError, match="version 99"):
        load_retriever(index_dir)


def test_failed_save_leaves_the_old_index_intact(index_dir, monkeypatch):
    index = LocalIndex.load(index_dir)
    before = results(index, "hybrid")
    index.add_documents([Document("extra", "Adenosine terminates supraventricular tachycardia.", "t")])

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(index._bm25, "save", boom)
    with pytest.raises(OSError):
        index.save(index_dir)
    assert results(LocalIndex.load(index_dir), "hybrid") == before
    assert sorted(p.name for p in index_dir.parent.iterdir() if p.name.startswith(".idx")) == [".idx.lock"]


def test_search_arguments_are_checked(index_dir):
    r = load_retriever(index_dir)
    with pytest.raises(MedQAError, match="k must be"):
        r.search("x", 0)
    with pytest.raises(MedQAError, match="unknown retrieval mode"):
        r.search("x", 2, mode="sparse")
    assert len(r.search("beta blockers", 500)) <= len(r)
    with pytest.raises(MedQAError, match="unsupported retriever address"):
        load_retriever("opensearch://localhost:9200/medqa")
