"""The real embedded Gemma 270M on 30 MedMCQA dev items: sane outputs end to end (~30 s on 2 CPU cores)."""
from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.real_model


@pytest.fixture
def one_thread():
    """One torch thread: on a shared 2-core machine, OpenMP barriers make 2 threads several times slower."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_real_model_scores_medmcqa(shared_data, tmp_path, one_thread):
    import torch

    from medqa.data import load_items
    from medqa.evaluation import evaluate
    from medqa.modeling import load_model
    from medqa.prompts import encode, render_prompt
    from medqa.scoring.hf import scorer_from_bundle

    items = load_items(shared_data / "medmcqa" / "dev_public.jsonl", "medmcqa", limit=30, cop_base=1).items
    bundle = load_model("embedded", device="cpu", dtype="fp32")
    scorer = scorer_from_bundle(bundle, style="lmeval", batch_size=8)
    m = evaluate(scorer, items, tmp_path / "run", task="medmcqa", progress=False)
    assert m["n_labelled"] == 30 and 0.0 <= m["accuracy"] <= 1.0
    assert m["accuracy_ci95"][0] <= m["accuracy"] <= m["accuracy_ci95"][1]
    assert 0 <= m["ece"] <= 1 and m["nll"] > 0 and 0 <= m["brier"] <= 2
    # the letters must hold real probability mass at the answer position (a format check)
    assert m["mean_letter_mass"] > 0.2
    assert (tmp_path / "run" / "reliability.png").stat().st_size > 1000

    # one item against the model's own full forward pass (no padding, full-vocab logits)
    rows = scorer.score(items[:3])
    for row in rows:
        assert sum(math.exp(x) for x in row) == pytest.approx(1.0, abs=1e-5)
    ids = encode(bundle.tokenizer, render_prompt(items[2], "lmeval"))
    with torch.inference_mode():
        logits = bundle.model(torch.tensor([ids])).logits[0, -1]
    ref = torch.log_softmax(logits[scorer.letter_ids[:4]], -1).tolist()
    assert rows[2] == pytest.approx(ref, abs=1e-4)
