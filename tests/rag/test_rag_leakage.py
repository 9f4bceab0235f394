"""The leakage guard fires on evaluated questions found in the index (exact, edited, paraphrased) and only then."""
from __future__ import annotations

import pytest

from medqa.rag import build_index, check_leakage, load_retriever
from medqa.records import MCQItem, MedQAError

from rag_helpers import DOCS, write_jsonl

OPTS = ["aspirin", "heparin", "morphine", "oxygen"]
VERBATIM = "A 45-year-old man has crushing chest pain radiating to the left arm for two hours. What is the first drug to give?"
EDITED = ("A 62 year old woman on warfarin has an INR of 9 and melaena; which agent reverses the anticoagulation "
          "most rapidly in this setting?")
EDITED_IN_CORPUS = ("Question: A 62-year-old woman taking warfarin has an INR of 9 with melaena. Which agent reverses "
                    "the anticoagulation most rapidly in this setting? Answer: prothrombin complex concentrate.")
PARAPHRASE = ("A man aged 45 presents with two hours of crushing chest pain that spreads to his left arm. "
              "Which drug should be given first?")


def items():
    return [
        MCQItem(id="verbatim", question=VERBATIM, options=OPTS, answer=0),
        MCQItem(id="edited", question=EDITED, options=OPTS, answer=0),
        MCQItem(id="clean", question="Which electrolyte disturbance worsens digoxin toxicity in elderly patients?",
                options=OPTS, answer=0),
        MCQItem(id="short", question="Which is true?", options=OPTS, answer=0),
    ]


@pytest.fixture
def leaky_index(tmp_path):
    rows = [{"id": k, "text": v} for k, v in DOCS.items()]
    rows.append({"id": "copied", "text": "Explanation. " + VERBATIM.upper() + " Aspirin is given first."})
    rows.append({"id": "edited", "text": EDITED_IN_CORPUS})
    out = tmp_path / "leaky"
    build_index([write_jsonl(tmp_path / "c.jsonl", rows)], out, embed_model="hashing:256", chunk_words=30, overlap=5)
    return out


def test_guard_fires_on_exact_and_near_duplicates(leaky_index):
    report = check_leakage(load_retriever(leaky_index), items(), cosine_threshold=None)
    assert report.exact_ids == {"verbatim"}
    assert report.near_ids == {"edited"}
    by_item = {m.item_id: m for m in report.matches}
    assert by_item["verbatim"].chunk_id.startswith("copied#") and by_item["verbatim"].kind == "exact"
    assert by_item["edited"].kind == "ngram" and 0.5 <= by_item["edited"].score < 1
    c = report.counts()
    assert c == {"items": 4, "checked": 3, "skipped_short": 1, "leaked": 2, "exact": 1, "ngram": 1, "embedding": 0,
                 "expected_own_evidence": 0}
    assert "2 leaked" in report.summary() and report.to_dict()["counts"]["leaked"] == 2
    with pytest.raises(MedQAError, match="contains 2 of"):
        report.raise_if_leaked()


def test_guard_is_quiet_on_a_clean_index(tmp_path):
    rows = [{"id": k, "text": v} for k, v in DOCS.items()]
    rows.append({"id": "stock", "text": "Methotrexate is used in the treatment of psoriasis and rheumatoid arthritis."})
    out = tmp_path / "clean"
    build_index([write_jsonl(tmp_path / "c.jsonl", rows)], out, embed_model="hashing:256")
    # a short question sharing only a stock phrase (2 of its 4 five-grams) with a passage is not a duplicate
    stock = MCQItem(id="stock", question="L-asparaginase is used in the treatment of:", options=OPTS, answer=0)
    report = check_leakage(load_retriever(out), items() + [stock], cosine_threshold=0.95)
    assert not report.has_leakage and report.counts()["checked"] == 4
    report.raise_if_leaked()  # no error


def test_guard_catches_a_paraphrase_by_embedding(tmp_path, minilm):
    rows = [{"id": k, "text": v} for k, v in DOCS.items()] + [{"id": "para", "text": PARAPHRASE}]
    out = tmp_path / "para"
    build_index([write_jsonl(tmp_path / "c.jsonl", rows)], out, embed_model="embedded")
    only = [items()[0], items()[2]]
    report = check_leakage(load_retriever(out), only)
    assert report.leaked_ids == {"verbatim"}
    (m,) = report.matches
    assert m.kind == "embedding" and m.chunk_id == "para#0" and m.score >= 0.9
    assert not check_leakage(load_retriever(out), only, cosine_threshold=None).has_leakage


def test_guard_checks_explanations_when_asked(leaky_index):
    item = MCQItem(id="x", question="Which drug is given first for a myocardial infarction?", options=OPTS, answer=0,
                   explanation=DOCS["warfarin"])
    assert not check_leakage(load_retriever(leaky_index), [item], cosine_threshold=None).has_leakage
    report = check_leakage(load_retriever(leaky_index), [item], fields=("question", "explanation"),
                           cosine_threshold=None)
    assert report.exact_ids == {"x"} and report.matches[0].field == "explanation"
    with pytest.raises(MedQAError, match="unknown leakage field"):
        check_leakage(load_retriever(leaky_index), [item], fields=("answer",))


def test_guard_works_on_any_retriever_by_its_candidates(leaky_index):
    local = load_retriever(leaky_index)

    class Wrapped:  # e.g. a remote store: only search() is available
        def search(self, query, k=5):
            return local.search(query, k)

    report = check_leakage(Wrapped(), items())
    assert report.leaked_ids == {"verbatim", "edited"} and "candidates" in report.method


def test_matches_to_an_items_own_task_context_are_expected_not_leaks(tmp_path):
    """PubMedQA: the question is its paper's title, the index holds the abstracts (the task's evidence)."""
    from medqa.rag import own_context_docs

    abstract = "Does aspirin reduce mortality after myocardial infarction in elderly patients? We randomised 400 ..."
    rows = [
        {"pmid": "1", "QUESTION": "Does aspirin reduce mortality after myocardial infarction in elderly patients?",
         "CONTEXTS": [abstract], "final_decision": "yes", "LONG_ANSWER": "Yes."},
        {"pmid": "2", "QUESTION": "Is warfarin reversed faster by prothrombin complex than by plasma in bleeding?",
         "CONTEXTS": ["Background. Is warfarin reversed faster by prothrombin complex than by plasma in bleeding? "
                      "Methods ..."], "final_decision": "yes", "LONG_ANSWER": "Yes."},
    ]
    src = write_jsonl(tmp_path / "pqa.jsonl", rows)
    out = tmp_path / "pqa"
    build_index([src], out, embed_model="hashing:256")
    from medqa.data import load_items

    evaluated = load_items(src).items
    other = MCQItem(id="3", question=rows[0]["QUESTION"], options=["yes", "no", "maybe"], answer=0,
                    context="A different abstract.", source="pubmedqa")  # its question sits in *another* abstract
    report = check_leakage(load_retriever(out), evaluated + [other], cosine_threshold=None,
                           allowed=own_context_docs(evaluated + [other]))
    assert report.leaked_ids == {"3"} and report.matches[0].chunk_id == "pubmedqa:1#0"
    assert {m.item_id for m in report.expected} == {"1", "2"} and report.counts()["expected_own_evidence"] == 2
    assert "match only their own task-defined evidence" in report.summary()
    strict = check_leakage(load_retriever(out), evaluated, cosine_threshold=None)
    assert strict.leaked_ids == {"1", "2"}
