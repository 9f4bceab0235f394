from medqa.prompts import (encode, explanation_prefix, letter_continuations, letter_token_ids, render_prompt,
                           render_target)
from medqa.records import MCQItem
from medqa.testing import tiny_tokenizer

ITEM = MCQItem(id="1", question="Which vessel?", options=["Aorta", "Vena cava", "Pulmonary artery", "Portal vein"],
               answer=2, explanation="Because it carries deoxygenated blood.", subject="Anatomy")


def test_template_layout():
    p = render_prompt(ITEM)
    assert p == ("### Question:\nWhich vessel?\n\n### Options:\nA) Aorta\nB) Vena cava\nC) Pulmonary artery\n"
                 "D) Portal vein\n\n### Answer:\n")
    assert render_target(ITEM) == "C) Pulmonary artery\n\n### Explanation:\nBecause it carries deoxygenated blood."
    assert explanation_prefix(ITEM, 1).endswith("### Answer:\nB) Vena cava\n\n### Explanation:\n")


def test_target_without_explanation_has_no_empty_section():
    item = MCQItem(id="2", question="q?", options=["x", "y"], answer=0)
    assert render_target(item) == "A) x"


def test_context_and_evidence_block():
    item = MCQItem(id="3", question="q?", options=["yes", "no", "maybe"], answer=0, context="Abstract text.")
    p = render_prompt(item, evidence="[d1] passage")
    assert p.startswith("### Context:\nAbstract text.\n\n[d1] passage\n\n### Question:\nq?")


def test_lmeval_style_matches_reference_format():
    p = render_prompt(ITEM, style="lmeval")
    assert p == "Question: Which vessel?\nChoices:\nA. Aorta\nB. Vena cava\nC. Pulmonary artery\nD. Portal vein\nAnswer:"
    assert letter_continuations(3, "lmeval") == [" A", " B", " C"]
    assert letter_continuations(3, "medqa") == ["A", "B", "C"]


def test_letter_tokens_are_resolved_in_context():
    tok = tiny_tokenizer()
    bare, spaced = letter_token_ids(tok, "medqa"), letter_token_ids(tok, "lmeval")
    assert len(set(bare.ids)) == 5 and len(set(spaced.ids)) == 5
    # the trap: "A" after a newline and " A" after "Answer:" are different tokens
    assert set(bare.ids).isdisjoint(spaced.ids)
    full = tok(render_prompt(ITEM) + "C", add_special_tokens=False)["input_ids"]
    assert full[-1] == bare.ids[2]


def test_encode_adds_exactly_one_bos():
    tok = tiny_tokenizer()
    once = encode(tok, "### Question:\nheart?")
    assert once[0] == tok.bos_token_id and once[1] != tok.bos_token_id
    assert encode(tok, "<bos>### Question:\nheart?") == once
    assert tok.eos_token_id not in once
