"""Explanations and completions: stop at EOS / the next ``###`` section / the token limit; streaming; citations."""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import pytest
from engine_helpers import ScriptedTokens

from medqa.engine import extract_citations, make_item
from medqa.engine.generation import cut_at_stop, hold_back_stops
from medqa.records import MedQAError

ITEM = make_item("Which organ is affected?", ["heart", "lung", "kidney"])


def ids(tok, text):
    return tok(text, add_special_tokens=False)["input_ids"]


def test_explanation_stops_at_eos(dummy_engine, tiny_bundle):
    tok = tiny_bundle.tokenizer
    body = ids(tok, "heart lung")
    script = ScriptedTokens(body + [tok.eos_token_id] + ids(tok, " kidney liver kidney liver"))
    text = dummy_engine().explain(ITEM, 0, logits_processor=script, max_new_tokens=40)
    assert text == "heart lung"
    assert script.calls == len(body) + 1  # generation ended at EOS, nothing generated after it


def test_explanation_stops_at_a_new_section_marker(dummy_engine, tiny_bundle):
    tok = tiny_bundle.tokenizer
    before = ids(tok, "heart lung.\n\n")
    script = ScriptedTokens(before + ids(tok, "### Question:\nkidney liver heart lung kidney liver"))
    text = dummy_engine().explain(ITEM, 0, logits_processor=script, max_new_tokens=60)
    assert text == "heart lung."
    assert script.calls <= len(before) + 3 < 60  # stopped right after "###" appeared, not at the limit


def test_explanation_respects_the_token_limit(dummy_engine, tiny_bundle):
    tok = tiny_bundle.tokenizer
    engine = dummy_engine()
    script = ScriptedTokens(ids(tok, " heart lung kidney liver drug dose artery vein nerve muscle bone blood" * 3))
    done = engine.complete("### Explanation:\n", max_tokens=7, logits_processor=script)
    assert done.completion_tokens == 7 and done.finish_reason == "length"
    # a length-limited explanation is trimmed to its last full sentence when that keeps most of it
    script = ScriptedTokens(ids(tok, "heart lung kidney. liver drug dose artery vein"))
    assert dummy_engine().explain(ITEM, 0, logits_processor=script, max_new_tokens=5).endswith(".")


def test_explanation_prompt_is_conditioned_on_the_chosen_answer(dummy_engine, tiny_bundle):
    tok = tiny_bundle.tokenizer
    seen = {}

    class Spy(ScriptedTokens):
        def __call__(self, input_ids, scores):
            seen.setdefault("prompt", tok.decode(input_ids[0]))
            return super().__call__(input_ids, scores)

    dummy_engine().explain(ITEM, 1, logits_processor=Spy([tok.eos_token_id]))
    assert seen["prompt"].endswith("### Answer:\nB) lung\n\n### Explanation:\n")


def test_complete_finish_reasons_and_stop_strings(dummy_engine, tiny_bundle):
    tok = tiny_bundle.tokenizer
    engine = dummy_engine()
    eos = engine.complete("heart", 20, logits_processor=ScriptedTokens(ids(tok, " lung") + [tok.eos_token_id]))
    assert (eos.text, eos.finish_reason) == (" lung", "stop")
    stop = engine.complete("heart", 20, stop=["kidney"], logits_processor=ScriptedTokens(ids(tok, " lung kidney liver")))
    assert (stop.text, stop.finish_reason) == (" lung ", "stop") and stop.completion_tokens < 20
    assert stop.prompt_tokens == len(ids(tok, "heart")) + 1  # one BOS


def test_generate_is_greedy_and_deterministic(dummy_engine):
    engine = dummy_engine()
    first = engine.generate("### Question:\nheart", max_tokens=12)
    assert first == engine.generate("### Question:\nheart", max_tokens=12) and first


def test_stream_yields_the_same_text_as_generate(dummy_engine):
    engine = dummy_engine()
    pieces = list(engine.stream("### Question:\nheart lung", max_tokens=16))
    assert "".join(pieces) == engine.generate("### Question:\nheart lung", max_tokens=16)


def test_stream_cuts_stop_strings_that_straddle_pieces():
    assert "".join(hold_back_stops(["abc#", "#", "#def"], ["###"])) == "abc"
    assert "".join(hold_back_stops(["ab", "c#", "#d"], ["###"])) == "abc##d"
    assert list(hold_back_stops(["x", "y"], [])) == ["x", "y"]
    assert cut_at_stop("a STOP b END", ["END", "STOP"]) == ("a ", True)


def test_stream_closed_early_releases_the_model(dummy_engine, tiny_bundle):
    tok = tiny_bundle.tokenizer
    engine = dummy_engine()
    script = ScriptedTokens(ids(tok, " heart lung kidney liver" * 40))
    stream = engine.stream("heart", max_tokens=150, logits_processor=script)
    assert next(stream)
    stream.close()  # client disconnected
    deadline = time.time() + 20
    while not engine.lock.acquire(blocking=False):
        assert time.time() < deadline, "generation thread kept the engine lock after the stream was closed"
        time.sleep(0.05)
    engine.lock.release()
    assert script.calls < 150


def test_bad_generation_requests_fail_before_generating(dummy_engine):
    engine = dummy_engine()
    with pytest.raises(MedQAError, match="max_tokens"):
        engine.generate("heart", max_tokens=0)
    with pytest.raises(MedQAError, match="prompt is empty"):
        engine.stream("", max_tokens=5)
    with pytest.raises(MedQAError, match="context"):
        engine.generate("heart " * 600, max_tokens=600)
    with pytest.raises(MedQAError, match="temperature"):
        engine.generate("heart", max_tokens=3, temperature=-1)


def test_concurrent_callers_share_one_engine(dummy_engine):
    engine = dummy_engine()
    expected = engine.generate("### Question:\nlung", max_tokens=10)
    out: list[str] = []
    threads = [threading.Thread(target=lambda: out.append(engine.generate("### Question:\nlung", max_tokens=10)))
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out == [expected] * 4


@dataclass
class Hit:
    id: str
    text: str
    score: float
    source: str


class FakeRetriever:
    def __init__(self):
        self.queries = []

    def search(self, query, k):
        self.queries.append((query, k))
        return [Hit("p1", "The heart pumps blood.", 0.9, "book"), Hit("p2", "Lungs exchange gas.", 0.5, "book"),
                Hit("p3", "unused", 0.1, "book")][:k]


class EvidenceScorer:
    """Records the evidence strings the engine hands to the scorer."""

    name = "evidence-spy"

    def __init__(self):
        self.evidence = None

    def score(self, items, evidence=None):
        self.evidence = evidence
        return [[-0.1, -2.4] for _ in items]


def test_retrieved_evidence_reaches_prompts_and_only_retrieved_ids_are_cited(tiny_bundle):
    from medqa.engine import Engine

    tok = tiny_bundle.tokenizer
    scorer, retriever = EvidenceScorer(), FakeRetriever()
    engine = Engine(tiny_bundle, scorer, retriever=retriever, rag_k=2, threads=0)
    seen = {}

    class Spy(ScriptedTokens):
        def __call__(self, input_ids, scores):
            seen.setdefault("prompt", tok.decode(input_ids[0]))
            return super().__call__(input_ids, scores)

    res = engine.answer("Which organ pumps blood?", ["heart", "lung"], explain=False)
    assert [p.id for p in res.evidence] == ["p1", "p2"] and retriever.queries[0][1] == 2
    assert scorer.evidence == ["[p1] The heart pumps blood.\n[p2] Lungs exchange gas."]
    script = Spy(ids(tok, "The heart pumps [p1] blood [p3] [zz] [p2, p1]") + [tok.eos_token_id])
    from medqa.engine.options import make_item as mk
    item = mk("Which organ pumps blood?", ["heart", "lung"])
    text = engine.explain(item, 0, evidence=scorer.evidence[0], logits_processor=script)
    assert "[p1] The heart pumps blood." in seen["prompt"]
    assert extract_citations(text, [p.id for p in res.evidence]) == ["p1", "p2"]  # p3 was not retrieved
    assert engine.answer("Which organ?", ["heart", "lung"], explain=False, rag_k=0).evidence == []


def test_extract_citations_rules():
    assert extract_citations("see [a] and [b; a] and [c]", ["a", "b"]) == ["a", "b"]
    assert extract_citations("no brackets", ["a"]) == []


def test_sampling_is_reproducible_with_a_seed(dummy_engine):
    engine = dummy_engine()
    a = engine.generate("heart", max_tokens=10, temperature=1.0, seed=3)
    assert a == engine.generate("heart", max_tokens=10, temperature=1.0, seed=3)
    assert "".join(engine.stream("heart", max_tokens=10, temperature=1.0, seed=3)) == a
    with pytest.raises(MedQAError, match="unknown stream option"):
        engine.stream("heart", max_tokens=3, best_of=2)
