import pytest

from medqa.records import DataError, MCQItem


@pytest.mark.parametrize("kwargs,field", [
    (dict(question="  ", options=["a", "b"]), "question"),
    (dict(question="q", options=["a"]), "options"),
    (dict(question="q", options=list("abcdef")), "options"),
    (dict(question="q", options=["a", ""]), "options"),
    (dict(question="q", options=["a", "b"], answer=2), "answer"),
    (dict(question="q", options=["a", "b"], answer=True), "answer"),
])
def test_invalid_items_name_the_field(kwargs, field):
    with pytest.raises(DataError) as e:
        MCQItem(id="x", **kwargs)
    assert e.value.field == field
    assert field in str(e.value)


def test_roundtrip_and_letters():
    it = MCQItem(id="x", question="q", options=["a", "b", "c"], answer=1, subject="s")
    assert it.letters == "ABC" and it.answer_letter == "B"
    assert MCQItem.from_dict(it.to_dict()) == it


def test_where_prefix():
    with pytest.raises(DataError, match=r"f.jsonl:7 field 'options'"):
        MCQItem(id="x", question="q", options=["a", "b"]).validate  # noqa: B018 (valid)
        MCQItem.__new__(MCQItem)  # build an invalid one without __post_init__, then validate with a location
        bad = MCQItem.__new__(MCQItem)
        bad.question, bad.options, bad.answer = "q", ["a"], None
        bad.validate("f.jsonl:7")
