"""Reciprocal rank fusion, and a planted passage that only the fused ranking puts in the top k."""
from __future__ import annotations

import pytest

from medqa.rag.corpus import Document
from medqa.rag.hybrid import rrf
from medqa.rag.store import LocalIndex
from medqa.records import MedQAError


def test_rrf_scores_ties_and_weights():
    fused = rrf([["a", "b", "c"], ["c", "d"]], k=60)
    scores = dict(fused)
    assert scores["c"] == pytest.approx(1 / 63 + 1 / 61)
    assert [key for key, _ in fused] == ["c", "a", "b", "d"]  # c in both lists beats a, first in one
    # equal scores: the better single rank wins, then first appearance
    assert [key for key, _ in rrf([["x", "y"], ["y", "x"]])] == ["x", "y"]
    assert [key for key, _ in rrf([["a"], ["b"]], weights=[1.0, 2.0])] == ["b", "a"]
    assert rrf([]) == []
    with pytest.raises(MedQAError):
        rrf([["a"]], weights=[1.0, 2.0])


# The question names the disease; the planted passage answers it (names the enzyme) but shares only two
# ordinary words with it ("enzyme", "deficient") and does not repeat the disease name.
QUERY = "Which enzyme is deficient in Lesch-Nyhan syndrome?"
PLANTED = ("Boys with this X-linked condition are deficient in the enzyme hypoxanthine-guanine "
           "phosphoribosyltransferase: purine salvage fails, uric acid builds up and they injure their own lips and "
           "fingers.")
# Lexical decoys: the rare query words in unrelated text.  BM25 ranks them above the planted passage
# (rare terms weigh most); the embedding sees a band, a road closure, a bakery.
LEXICAL_DECOYS = [
    "The Lesch-Nyhan Syndrome Marching Band rehearses on Tuesdays in the old town hall; new drummers and trumpet "
    "players are welcome, and parking is free behind the library.",
    "Nyhan Street and Lesch Avenue will be closed for resurfacing next week, which means buses are diverted through "
    "the harbour district until the asphalt has cured.",
    "Our bakery's Lesch sourdough and Nyhan rye loaves rise with an enzyme-rich starter and sell out by noon; order "
    "online before nine to collect them warm.",
]
# Semantic decoys: other enzyme-deficiency diseases, close to the question in embedding space but sharing no
# query term with it ("deficiency" is not "deficient": no stemming).
SEMANTIC_DECOYS = [
    "Gout is treated acutely with colchicine or NSAIDs and prevented with allopurinol.",
    "Glucose-6-phosphate dehydrogenase deficiency causes haemolysis after fava beans.",
    "Phenylketonuria results from phenylalanine hydroxylase deficiency.",
    "Adenosine deaminase deficiency causes severe combined immunodeficiency.",
    "Tay-Sachs disease is caused by hexosaminidase A deficiency with a cherry-red spot.",
    "Von Gierke disease is glucose-6-phosphatase deficiency with hypoglycaemia and lactic acidosis.",
    "Pompe disease is acid maltase deficiency affecting the heart.",
    "Xanthine oxidase converts hypoxanthine to xanthine and xanthine to uric acid.",
    "Orotic aciduria is a defect in UMP synthase causing megaloblastic anaemia.",
    "Hereditary fructose intolerance is aldolase B deficiency.",
    "Alkaptonuria is homogentisate oxidase deficiency with dark urine.",
    "Loss of purine salvage is the classic cause of hyperuricaemia with self-mutilation in young boys.",
    "Inborn errors of purine metabolism: absent salvage leads to urate overproduction, arthritis and self-harm.",
]


def rank_of(index: LocalIndex, mode: str, doc_id: str) -> int:
    ids = [p.id.split("#")[0] for p in index.search(QUERY, len(index), mode=mode)]
    return ids.index(doc_id) + 1 if doc_id in ids else 10**6


def test_hybrid_finds_planted_passage_that_dense_and_bm25_each_miss(minilm):
    docs = [Document("planted", PLANTED, "test")]
    docs += [Document(f"lexical{i}", t, "test") for i, t in enumerate(LEXICAL_DECOYS)]
    docs += [Document(f"semantic{i}", t, "test") for i, t in enumerate(SEMANTIC_DECOYS)]
    index = LocalIndex.new(minilm)
    index.add_documents(docs)
    k = 3
    ranks = {mode: rank_of(index, mode, "planted") for mode in ("dense", "bm25", "hybrid")}
    top = {mode: [p.id for p in index.search(QUERY, k, mode=mode)] for mode in ("dense", "bm25", "hybrid")}
    assert ranks["dense"] > k, (ranks, top)  # dense alone misses it: its top 3 are other deficiency diseases
    assert all(i.startswith("semantic") for i in top["dense"]), top
    assert ranks["bm25"] > k, (ranks, top)  # BM25 alone misses it: its top 3 are the lexical decoys
    assert all(i.startswith("lexical") for i in top["bm25"]), top
    assert ranks["hybrid"] <= k, (ranks, top)  # fusion: good on both beats best on one
    assert "planted#0" in top["hybrid"]
