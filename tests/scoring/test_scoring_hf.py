"""HFScorer: crafted model picks the right letter, batch == one-at-a-time, matches the model's own forward."""
from __future__ import annotations

import math

import pytest
import torch

from medqa.prompts import encode, render_prompt
from medqa.records import MCQItem, MedQAError
from medqa.scoring import Scorer
from medqa.scoring.hf import HFScorer
from medqa.testing import tiny_model, tiny_tokenizer


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def _items(n=7):
    """Mixed prompt lengths (1..19 repeats) and option counts (2..5)."""
    opts = ["heart", "lung", "kidney", "liver", "bone"]
    return [MCQItem(id=f"q{i}", question="which drug dose " * (1 + 3 * i) + "?", options=opts[: 2 + i % 4],
                    answer=i % 2, subject="s") for i in range(n)]


def _crafted(tok, style, alphas):
    """A llama whose letter logits at the answer position are exactly ``alphas`` (others 0).

    Zeroing o_proj/down_proj makes every layer add nothing, so the final hidden state at a position
    depends only on that position's token.  The answer position's token is the prompt's last token
    (the same for every item), with hidden vector v; letter rows of the LM head are alpha_k * v/|v|^2.
    Reading the wrong position (a pad, or the last *padded* slot) would give different logits.
    """
    model = tiny_model(tok, arch="llama")
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        ids = encode(tok, render_prompt(_items(1)[0], style))
        v = model.model(torch.tensor([ids])).last_hidden_state[0, -1]  # (H,)
        scorer = HFScorer(model, tok, style=style, batch_size=4)
        model.lm_head.weight.zero_()
        for k, a in enumerate(alphas):
            model.lm_head.weight[scorer.letter_ids[k]] = a * v / v.dot(v)
    return model, scorer


@pytest.mark.parametrize("style", ["medqa", "lmeval"])
def test_crafted_model_picks_the_letter_and_exact_probs(tok, style):
    alphas = [0.0, 1.0, 3.0, -1.0, 2.0]  # C is the favourite among 3+ options, B among 2
    _model, scorer = _crafted(tok, style, alphas)
    items = _items(7)
    rows = scorer.score(items)
    for item, row in zip(items, rows):
        k = len(item.options)
        assert len(row) == k
        z = alphas[:k]
        lse = math.log(sum(math.exp(x) for x in z))
        assert row == pytest.approx([x - lse for x in z], abs=1e-5)
        assert max(range(k), key=row.__getitem__) == (2 if k >= 3 else 1)
    # letter mass: the V - 5 other tokens have logit 0, so the valid letters hold a known share
    k0 = len(items[0].options)
    z = alphas[:k0]
    expected = sum(math.exp(x) for x in z) / (sum(math.exp(x) for x in alphas) + len(tok) - 5)
    assert scorer.last_letter_mass[0] == pytest.approx(expected, rel=1e-4)


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_mixed_length_batch_equals_one_at_a_time(tok, arch):
    model = tiny_model(tok, arch=arch, seed=1)
    items = _items(7)
    batched = HFScorer(model, tok, batch_size=4).score(items)
    single = HFScorer(model, tok, batch_size=1).score(items)
    for b, s in zip(batched, single):
        assert len(b) == len(s)
        assert b == pytest.approx(s, abs=1e-4)
        assert sum(math.exp(x) for x in b) == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_matches_full_forward_of_the_model(tok, arch):
    """The decoder + last-position LM head shortcut equals the model's own forward pass."""
    model = tiny_model(tok, arch=arch, seed=2)
    items = _items(5)
    scorer = HFScorer(model, tok, style="lmeval", batch_size=8)
    rows = scorer.score(items)
    for item, row in zip(items, rows):
        ids = encode(tok, render_prompt(item, "lmeval"))
        assert ids[0] == tok.bos_token_id and ids[1] != tok.bos_token_id  # exactly one BOS
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, -1]  # (V,)
        ref = torch.log_softmax(logits[scorer.letter_ids[: len(item.options)]], -1)
        assert row == pytest.approx(ref.tolist(), abs=1e-5)


def test_peft_wrapped_model_uses_the_adapter(tok):
    from peft import LoraConfig, get_peft_model

    model = tiny_model(tok, arch="llama", seed=3)
    items = _items(3)
    before = HFScorer(model, tok).score(items)
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    peft_model.eval()
    after = HFScorer(peft_model, tok).score(items)
    with torch.no_grad():
        ids = encode(tok, render_prompt(items[0]))
        ref = torch.log_softmax(peft_model(input_ids=torch.tensor([ids])).logits[0, -1][
            HFScorer(peft_model, tok).letter_ids[:2]], -1)
    assert after[0] == pytest.approx(ref.tolist(), abs=1e-5)
    assert max(abs(a - b) for a, b in zip(after[0], before[0])) > 1e-6  # the adapter changed the scores


def test_truncation_keeps_bos_and_prompt_end(tok):
    model = tiny_model(tok, arch="llama")
    scorer = HFScorer(model, tok, max_length=24)
    item = _items(6)[5]
    full = encode(tok, render_prompt(item))
    ids = scorer.encode_items([item])[0]
    assert len(full) > 24 and len(ids) == 24
    assert ids[0] == tok.bos_token_id and ids[1:] == full[-23:]
    assert scorer.truncated == 1
    assert len(scorer.score([item])[0]) == len(item.options)


def test_evidence_changes_the_prompt_and_is_checked(tok):
    model = tiny_model(tok, arch="llama")
    scorer = HFScorer(model, tok)
    items = _items(2)
    assert isinstance(scorer, Scorer)
    plain = scorer.score(items)
    with_ev = scorer.score(items, evidence=["[p1] insulin glucose", None])
    assert with_ev[1] == pytest.approx(plain[1], abs=1e-6) and with_ev[0] != pytest.approx(plain[0], abs=1e-6)
    with pytest.raises(MedQAError, match="one per item"):
        scorer.score(items, evidence=["x"])
    with pytest.raises(MedQAError, match="batch-size"):
        HFScorer(model, tok, batch_size=0)
