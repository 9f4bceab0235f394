"""Data → tokens: prompt masking, EOS, truncation order, collator padding, the resumable batch order."""
from __future__ import annotations

import pytest
from train_helpers import tiny_items

from medqa.prompts import encode, render_prompt, render_target
from medqa.testing import tiny_tokenizer
from medqa.training.tokenize import IGNORE_INDEX, BatchPlan, ExampleEncoder, SupervisedCollator


@pytest.fixture(scope="module")
def tok():
    return tiny_tokenizer()


def test_labels_mask_the_prompt_and_supervise_answer_explanation_eos(tok):
    item = tiny_items(1)[0]
    ex = ExampleEncoder(tok, max_length=512).encode(item)
    prompt_ids = encode(tok, render_prompt(item))
    assert list(ex.input_ids[: ex.n_prompt]) == prompt_ids  # the shared renderer, one BOS
    assert ex.input_ids[-1] == tok.eos_token_id and ex.n_eos == 1
    batch = SupervisedCollator(tok.pad_token_id)([ex])
    labels = batch["labels"][0].tolist()
    assert all(x == IGNORE_INDEX for x in labels[: ex.n_prompt])  # no loss on the prompt
    assert labels[ex.n_prompt:] == list(ex.input_ids[ex.n_prompt:])  # answer + explanation + EOS
    assert tok.decode(labels[ex.n_prompt:-1]) == render_target(item)
    # the flat loss targets are exactly the supervised labels, predicted from the previous position
    assert batch["targets"].tolist() == labels[ex.n_prompt:]
    assert batch["cols"].tolist() == list(range(ex.n_prompt - 1, ex.length - 1))


def test_first_answer_token_is_the_scored_letter_token(tok):
    """Training supervises exactly the token the scorer reads after ``### Answer:\\n`` (no "B)" merge)."""
    from medqa.prompts import letter_token_ids

    letters = letter_token_ids(tok, "medqa").ids
    for item in tiny_items(4):
        ex = ExampleEncoder(tok, max_length=512).encode(item)
        assert ex.input_ids[ex.n_prompt] == letters[item.answer]


def test_train_on_prompt_option_supervises_everything_but_bos(tok):
    ex = ExampleEncoder(tok, max_length=512).encode(tiny_items(1)[0])
    labels = SupervisedCollator(tok.pad_token_id, train_on_prompt=True)([ex])["labels"][0].tolist()
    assert labels[0] == IGNORE_INDEX and labels[1:] == list(ex.input_ids[1:])


def test_pad_equal_to_eos_never_masks_the_eos_target(tok):
    items = tiny_items(3)
    enc = ExampleEncoder(tok, max_length=512)
    exs = [enc.encode(it) for it in items]
    batch = SupervisedCollator(pad_id=tok.eos_token_id)(exs)  # the classic trap: pad id == eos id
    for r, ex in enumerate(exs):
        row = batch["labels"][r].tolist()
        assert row[ex.length - 1] == tok.eos_token_id  # EOS is a target ...
        assert all(x == IGNORE_INDEX for x in row[ex.length:])  # ... padding (same id) is not
        assert batch["attention_mask"][r].sum() == ex.length
    assert int((batch["targets"] == tok.eos_token_id).sum()) == len(exs)


def test_loss_weights(tok):
    ex = ExampleEncoder(tok, max_length=512).encode(tiny_items(1)[0])
    w = SupervisedCollator(tok.pad_token_id, letter_weight=3.0, answer_weight=1.0, explanation_weight=0.25)([ex])["weights"]
    assert w[0] == 3.0  # the answer letter
    assert set(w[1: ex.n_answer].tolist()) == {1.0}
    assert set(w[ex.n_answer: ex.n_answer + ex.n_expl].tolist()) == {0.25}
    assert w[-1] == 1.0  # EOS
    zero = SupervisedCollator(tok.pad_token_id, explanation_weight=0.0)([ex])
    assert len(zero["targets"]) == ex.n_answer + ex.n_eos  # weight 0 → not gathered at all


def test_truncation_cuts_explanation_first_never_the_answer(tok):
    items = tiny_items(6)
    full = ExampleEncoder(tok, max_length=1024).encode_all(items)[0]
    limit = max(e.n_prompt + e.n_answer for e in full) + 12
    exs, stats = ExampleEncoder(tok, max_length=limit).encode_all(items)
    assert stats.explanation_cut + stats.explanation_dropped > 0 and stats.prompt_cut == 0
    for f, e in zip(full, exs):
        assert e.length <= limit
        assert e.input_ids[: e.n_prompt + e.n_answer] == f.input_ids[: f.n_prompt + f.n_answer]  # answer intact
        assert e.n_expl <= f.n_expl and e.input_ids[-1] == tok.eos_token_id
    assert "explanations cut to fit" in stats.summary()
    # too short even for prompt + answer: the prompt loses its start (BOS kept), the answer survives
    tiny = ExampleEncoder(tok, max_length=full[0].n_answer + 12).encode_all(items[:1])
    e = tiny[0][0]
    assert tiny[1].prompt_cut == 1 and e.input_ids[0] == tok.bos_token_id
    assert e.input_ids[e.n_prompt: e.n_prompt + e.n_answer] == full[0].input_ids[full[0].n_prompt: full[0].n_prompt + full[0].n_answer]


def test_batch_plan_is_seeded_grouped_and_shardable():
    lengths = [10 + (i * 37) % 90 for i in range(50)]
    plan = BatchPlan(lengths, batch_size=4, world_size=1, seed=3)
    e0 = plan.epoch(0)
    assert e0 == BatchPlan(lengths, batch_size=4, seed=3).epoch(0)  # deterministic
    assert e0 != plan.epoch(1)  # reshuffled per epoch
    assert sorted(i for b in e0 for i in b) == list(range(50))  # every example once per epoch
    spread = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in e0) / len(e0)
    rand = BatchPlan(lengths, batch_size=4, seed=3, group_by_length=False).epoch(0)
    spread_rand = sum(max(lengths[i] for i in b) - min(lengths[i] for i in b) for b in rand) / len(rand)
    assert spread < spread_rand / 2  # length grouping: little padding
    assert max(lengths[i] for i in e0[0]) == max(lengths)  # longest batch first (OOM shows at once)
    # 2 processes with batch 2 see the same global batches as 1 process with batch 4
    two = BatchPlan(lengths, batch_size=2, world_size=2, seed=3)
    assert two.epoch(0) == e0
    for b in two.epoch(0):
        assert two.rank_slice(b, 0) + two.rank_slice(b, 1) == list(b)


def test_permuted_epochs_are_seeded_and_keep_the_gold_text(tok):
    from medqa.training.tokenize import EpochExamples

    items = tiny_items(12)
    enc = ExampleEncoder(tok, max_length=512)
    a, b = EpochExamples(items, enc, permute=1.0, seed=1), EpochExamples(items, enc, permute=1.0, seed=1)
    assert a.get(0) == b.get(0) and a.get(1) != a.get(0)  # deterministic per (seed, epoch), new order each epoch
    assert EpochExamples(items, enc, permute=0.0).get(3) == enc.encode_all(items)[0]
    for item, ex in zip(items, a.get(1)):  # the supervised answer line still names the gold option's text
        answer = tok.decode(ex.input_ids[ex.n_prompt: ex.n_prompt + ex.n_answer])
        assert answer.endswith(item.options[item.answer].strip()) and ex.n_expl == 0


def test_chunked_head_loss_equals_unchunked(monkeypatch):
    """Long supervised spans go through the LM head in checkpointed chunks: same loss and gradients."""
    import torch

    from medqa.testing import tiny_model
    from medqa.training import lora

    items = tiny_items(4)
    tok_ = tiny_tokenizer()
    batch = SupervisedCollator(tok_.pad_token_id)([ExampleEncoder(tok_, 512).encode(it) for it in items])
    args = {k: batch[k] for k in ("input_ids", "attention_mask", "rows", "cols", "targets", "weights")}
    results = []
    for chunk in (10**6, 7):
        monkeypatch.setattr(lora, "CE_CHUNK", chunk)
        model = tiny_model(tok_, seed=1)
        model.train()
        loss, _ = lora._module_class()(model)(**args)
        loss.backward()
        results.append((loss.item(), model.model.layers[0].mlp.up_proj.weight.grad.clone()))
    assert abs(results[0][0] - results[1][0]) < 1e-4
    assert torch.allclose(results[0][1], results[1][1], atol=1e-5)
