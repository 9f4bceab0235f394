"""Chunking: sizes, overlap, sentence alignment, and ids that never change for the same text."""
from __future__ import annotations

import pytest

from medqa.rag.chunking import chunk_document, sentence_words, split_words, text_sha
from medqa.rag.corpus import Document, clean_markdown, iter_documents, load_corpus
from medqa.records import DataError, MedQAError


def long_text(n_sentences: int = 40) -> str:
    return " ".join(f"Sentence {i} talks about topic {i % 7} in about ten short words here." for i in range(n_sentences))


def test_windows_respect_size_and_overlap():
    words, _ = sentence_words(long_text())
    chunks = split_words(long_text(), chunk_words=50, overlap=12)
    assert len(chunks) > 5
    assert all(len(c.split()) <= 50 for c in chunks)
    # every word is covered, in order, and consecutive chunks share at most `overlap` words
    rebuilt = chunks[0].split()
    for prev, cur in zip(chunks, chunks[1:]):
        p, c = prev.split(), cur.split()
        shared = next(k for k in range(min(len(p), len(c)), -1, -1) if p[len(p) - k:] == c[:k])
        assert 0 < shared <= 12
        rebuilt += c[shared:]
    assert rebuilt == words


def test_chunks_start_and_end_at_sentences_when_possible():
    for c in split_words(long_text(), chunk_words=50, overlap=12):
        assert c.startswith("Sentence ") and c.endswith("here.")


def test_sentence_longer_than_window_is_cut_by_words():
    text = " ".join(f"w{i}" for i in range(95)) + "."
    chunks = split_words(text, chunk_words=40, overlap=10)
    assert [len(c.split()) for c in chunks] == [40, 40, 35]
    assert chunks[1].split()[0] == "w30"


def test_short_document_is_one_chunk_and_empty_none():
    assert split_words("  Just   one\nline. ", 50, 10) == ["Just one line."]
    assert split_words(" \n ", 50, 10) == []


def test_ids_are_stable_and_independent_of_other_documents():
    a1 = chunk_document("doc-a", long_text(), "s", chunk_words=50, overlap=12)
    a2 = chunk_document("doc-a", long_text(), "elsewhere", chunk_words=50, overlap=12)
    assert [c.id for c in a1] == [f"doc-a#{i}" for i in range(len(a1))]
    assert [(c.id, c.text, c.sha) for c in a1] == [(c.id, c.text, c.sha) for c in a2]
    assert a1[0].sha == text_sha(a1[0].text) and len(a1[0].sha) == 16
    # pinned: a change here changes the ids/texts of every saved index (bump CHUNKING_VERSION then)
    pinned = chunk_document("doc-a", long_text(12), chunk_words=50, overlap=12)
    assert [(c.id, len(c.text.split()), c.sha) for c in pinned] == [
        ("doc-a#0", 48, "704056ec3adc1939"), ("doc-a#1", 48, "2ce66f8340c20380"),
        ("doc-a#2", 48, "c9282cbd733f238a"), ("doc-a#3", 36, "57b12c132ee2c43c"),
    ]
    # editing one document changes only its own chunks
    docs = [Document("x", long_text(), "s"), Document("y", "Other text. " * 30, "s")]
    before = {c.id: c.sha for d in docs for c in chunk_document(d.id, d.text, chunk_words=50, overlap=12)}
    edited = [Document("x", long_text().replace("topic 3", "subject 3"), "s"), docs[1]]
    after = {c.id: c.sha for d in edited for c in chunk_document(d.id, d.text, chunk_words=50, overlap=12)}
    assert {k for k in before if k.startswith("y#")} == {k for k in after if k.startswith("y#")}
    assert all(before[k] == after[k] for k in before if k.startswith("y#"))
    assert any(before[k] != after[k] for k in before if k.startswith("x#"))


def test_whitespace_and_unicode_normalisation_do_not_change_ids():
    a = chunk_document("d", "Heart  failure.\tLoop diuretics relieve congestion.", chunk_words=50, overlap=10)
    b = chunk_document("d", "Heart failure. Loop diuretics relieve congestion.", chunk_words=50, overlap=10)
    assert [(c.id, c.sha) for c in a] == [(c.id, c.sha) for c in b]


@pytest.mark.parametrize("words, overlap", [(4, 0), (50, 26), (50, -1), (True, 0)])
def test_bad_settings_are_user_errors(words, overlap):
    with pytest.raises(MedQAError):
        split_words("text", words, overlap)


def test_markdown_and_folder_sources(tmp_path):
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.md").write_text("# Angina\n\nUse **nitrates** ([guide](http://x)).\n![img](p.png)\n", encoding="utf-8")
    (folder / "sub" / "b.txt").write_text("Plain text note.", encoding="utf-8")
    (folder / "skip.bin").write_bytes(b"\x00")
    docs = iter_documents(folder)
    assert [d.id for d in docs] == ["notes/a.md", "notes/sub/b.txt"]
    assert docs[0].text.split() == ["Angina.", "Use", "nitrates", "(guide)."]
    assert clean_markdown("## Title ##\n- item") == "Title.\nitem"


def test_record_sources_ids_and_conflicts(tmp_path, records_file):
    docs, repeats = load_corpus([records_file, records_file])
    assert repeats == 6 and [d.id for d in docs][:2] == ["angina", "heart-failure"]
    noid = tmp_path / "noid.csv"
    noid.write_text("title,text\nT,Some text.\n", encoding="utf-8")
    (doc,) = iter_documents(noid)
    assert doc.id.startswith("noid:") and doc.text == "T.\nSome text."
    clash = tmp_path / "clash.jsonl"
    clash.write_text('{"id": "angina", "text": "different"}\n', encoding="utf-8")
    with pytest.raises(DataError, match="two different texts"):
        load_corpus([records_file, clash])
    with pytest.raises(DataError, match="not found"):
        iter_documents(tmp_path / "missing.jsonl")


def test_mcq_sources_give_contexts_and_explanations(tmp_path):
    import json

    pub = tmp_path / "pub.jsonl"
    pub.write_text(json.dumps({"pmid": "123", "QUESTION": "Does X help?", "CONTEXTS": ["Part one.", "Part two."],
                               "final_decision": "yes", "LONG_ANSWER": "Yes."}) + "\n", encoding="utf-8")
    (doc,) = iter_documents(pub)
    assert doc.id == "pubmedqa:123" and doc.text == "Part one.\nPart two."
    mcq = tmp_path / "train.jsonl"
    rows = [{"id": f"q{i}", "question": f"Q{i}?", "opa": "a", "opb": "b", "opc": "c", "opd": "d", "cop": 4,
             "exp": "" if i == 1 else f"Because {i}."} for i in range(3)]
    mcq.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    docs = iter_documents(mcq)
    assert [(d.id, d.text) for d in docs] == [("medmcqa:q0", "Because 0."), ("medmcqa:q2", "Because 2.")]
