"""Each adapter on hand-written rows in every format variant it claims to support."""
from __future__ import annotations

import pytest

from medqa.data import ADAPTERS, AdapterContext, detect_dataset
from medqa.data.adapters import detect_cop_base
from medqa.records import DataError, MCQItem


def ctx(name: str, cop_base: int | None = None) -> AdapterContext:
    return AdapterContext(name, where="f.jsonl:3", index=2, cop_base=cop_base)


MEDMCQA_ROW = {
    "question": "Drug of choice for X?",
    "exp": None,
    "cop": 2,
    "opa": "a1",
    "opb": "b1",
    "opc": "c1",
    "opd": "d1",
    "subject_name": "Pharmacology",
    "topic_name": None,
    "id": "abc-1",
    "choice_type": "single",
}


def test_medmcqa_one_based_and_zero_based():
    one = ADAPTERS["medmcqa"](MEDMCQA_ROW, ctx("medmcqa", cop_base=1))
    zero = ADAPTERS["medmcqa"](MEDMCQA_ROW, ctx("medmcqa", cop_base=0))
    assert (one.answer, one.answer_letter, zero.answer) == (1, "B", 2)
    assert one.options == ["a1", "b1", "c1", "d1"]
    assert one.id == "abc-1" and one.subject == "Pharmacology" and one.source == "medmcqa"
    assert one.explanation == ""  # null exp
    assert one.meta == {"choice_type": "single"}  # null topic_name dropped


def test_medmcqa_cop_out_of_range_names_field():
    with pytest.raises(DataError) as e:
        ADAPTERS["medmcqa"]({**MEDMCQA_ROW, "cop": 5}, ctx("medmcqa", cop_base=1))
    assert e.value.field == "cop" and e.value.where == "f.jsonl:3"
    assert "out of range" in str(e.value)


def test_medqa_jind11_format():
    row = {
        "question": "A 68-year-old man ...?",
        "answer": "Third",
        "options": {"A": "First", "B": "Second", "C": "Third", "D": "Fourth"},
        "meta_info": "step1",
        "answer_idx": "C",
        "metamap_phrases": ["x"],
    }
    item = ADAPTERS["medqa"](row, ctx("medqa"))
    assert item.options == ["First", "Second", "Third", "Fourth"]
    assert item.answer == 2 and item.meta == {"meta_info": "step1"}
    assert item.id.startswith("medqa-")  # stable content id
    assert item.id == ADAPTERS["medqa"](dict(row), ctx("medqa")).id


def test_medqa_five_options_and_mismatched_answer_text():
    row = {"question": "q?", "options": dict(zip("ABCDE", "vwxyz")), "answer_idx": "E", "answer": "z"}
    assert ADAPTERS["medqa"](row, ctx("medqa")).answer == 4
    with pytest.raises(DataError) as e:
        ADAPTERS["medqa"]({**row, "answer": "v"}, ctx("medqa"))
    assert e.value.field == "answer_idx"


def test_medqa_hub_gbaker_format():
    row = {"id": "test-00001", "sent1": "Stem?", "sent2": "", "ending0": "a", "ending1": "b",
           "ending2": "c", "ending3": "d", "label": 3}
    item = ADAPTERS["medqa"](row, ctx("medqa"))
    assert (item.question, item.options, item.answer, item.id) == ("Stem?", ["a", "b", "c", "d"], 3, "test-00001")


def test_pubmedqa_github_format():
    row = {"pmid": "123", "QUESTION": "Does X help?", "CONTEXTS": ["Background.", "Results."],
           "LABELS": ["B", "R"], "final_decision": "Maybe", "LONG_ANSWER": "Possibly.", "YEAR": "2001"}
    item = ADAPTERS["pubmedqa"](row, ctx("pubmedqa"))
    assert item.options == ["yes", "no", "maybe"] and item.answer == 2
    assert item.context == "Background.\nResults." and item.explanation == "Possibly."
    assert item.id == "123" and item.meta == {"year": "2001"}


def test_pubmedqa_hub_format():
    row = {"pubid": 456, "question": "Is Y safe?", "context": {"contexts": ["Only passage."], "labels": ["X"]},
           "long_answer": "Yes it is.", "final_decision": "yes"}
    item = ADAPTERS["pubmedqa"](row, ctx("pubmedqa"))
    assert (item.id, item.answer, item.context, item.explanation) == ("456", 0, "Only passage.", "Yes it is.")


def test_pubmedqa_bad_decision():
    row = {"QUESTION": "q?", "CONTEXTS": ["c"], "final_decision": "perhaps"}
    with pytest.raises(DataError) as e:
        ADAPTERS["pubmedqa"](row, ctx("pubmedqa"))
    assert e.value.field == "final_decision"


def test_mmlu_csv_and_hub_formats():
    csv_row = {"subject": "anatomy", "question": "Q?", "A": "a", "B": "b", "C": "c", "D": "d", "answer": "D"}
    hub_row = {"question": "Q?", "subject": "anatomy", "choices": ["a", "b", "c", "d"], "answer": 3}
    a, b = ADAPTERS["mmlu"](csv_row, ctx("mmlu")), ADAPTERS["mmlu"](hub_row, ctx("mmlu"))
    assert (a.options, a.answer, a.subject) == (b.options, b.answer, b.subject) == (["a", "b", "c", "d"], 3, "anatomy")
    assert a.id == b.id  # same content -> same stable id, whichever format it came from
    with pytest.raises(DataError) as e:
        ADAPTERS["mmlu"]({**csv_row, "answer": "AB"}, ctx("mmlu"))
    assert e.value.field == "answer"


def test_generic_round_trips_to_dict():
    item = MCQItem("x1", "Q?", ["p", "q", "r"], 1, "because", "Cardio", "ctx", "medmcqa", {"k": 1})
    assert ADAPTERS["generic"](item.to_dict(), ctx("generic")) == item


def test_generic_letter_answer_and_unlabeled():
    assert ADAPTERS["generic"]({"question": "Q?", "options": ["a", "b"], "answer": "b"}, ctx("generic")).answer == 1
    assert ADAPTERS["generic"]({"question": "Q?", "options": ["a", "b"]}, ctx("generic")).answer is None
    with pytest.raises(DataError) as e:
        ADAPTERS["generic"]({"question": "Q?", "options": ["a", "b"], "answer": 2}, ctx("generic"))
    assert e.value.field == "answer"


@pytest.mark.parametrize(
    "fields, expected",
    [
        (MEDMCQA_ROW.keys(), "medmcqa"),
        (["question", "answer", "options", "answer_idx"], "medqa"),
        (["id", "sent1", "sent2", "ending0", "ending1", "ending2", "ending3", "label"], "medqa"),
        (["pmid", "QUESTION", "CONTEXTS", "final_decision"], "pubmedqa"),
        (["pubid", "question", "context", "long_answer", "final_decision"], "pubmedqa"),
        (["subject", "question", "A", "B", "C", "D", "answer"], "mmlu"),
        (["question", "subject", "choices", "answer"], "mmlu"),
        (MCQItem("i", "q", ["a", "b"]).to_dict().keys(), "generic"),
        (["prompt", "completion"], None),
    ],
)
def test_detect_dataset(fields, expected):
    assert detect_dataset(fields) == expected


def test_detect_cop_base_rules():
    assert detect_cop_base([0, 1, 2, 3], "f")[0] == 0
    assert detect_cop_base([1, 2, 3, 4], "f")[0] == 1
    assert detect_cop_base(["4", "2", None], "f")[0] == 1  # CSV strings count, nulls are ignored
    for values in ([1, 2, 3, 3], [0, 4]):
        with pytest.raises(DataError, match="--cop-base"):
            detect_cop_base(values, "f")
