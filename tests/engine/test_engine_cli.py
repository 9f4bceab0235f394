"""``medqa ask`` and ``medqa predict`` end to end on a tiny saved model."""
from __future__ import annotations

import json
import math

import pytest
from engine_helpers import medmcqa_rows, write_jsonl

from medqa.cli import main
from medqa.engine import AnswerResult


def ask(tiny_dir, *args):
    return main(["ask", *args, "--model", tiny_dir, "--device", "cpu", "--threads", "0", "--max-new-tokens", "8"])


def test_ask_prints_answer_probabilities_explanation_and_disclaimer(tiny_dir, capsys):
    assert ask(tiny_dir, "Which organ pumps blood?", "--options", "A) heart B) lung\nC) kidney",
               "--abstain-below", "0") == 0
    out = capsys.readouterr().out
    assert out.startswith("Answer: ")
    for letter, text in zip("ABC", ("heart", "lung", "kidney")):
        assert f"{letter}) {text}" in out
    assert out.count("█") + out.count("░") == 30  # one 10-cell bar per option
    assert "Explanation:" in out and "Not medical advice" in out


def test_ask_json_follows_the_schema(tiny_dir, capsys):
    assert ask(tiny_dir, "Which organ pumps blood?", "--option", "heart", "--option", "lung", "--json", "--no-explain") == 0
    res = AnswerResult.model_validate_json(capsys.readouterr().out)
    assert res.schema_version == "medqa.answer/1" and res.options == ["heart", "lung"] and res.explanation == ""
    assert math.isclose(sum(res.probabilities.values()), 1.0, abs_tol=1e-9)
    assert res.model == tiny_dir and res.disclaimer.startswith("Not medical advice")


def test_ask_abstention_wording(tiny_dir, capsys):
    assert ask(tiny_dir, "Which organ? (A) heart (B) lung (C) kidney (D) liver", "--abstain-below", "0.99",
               "--no-explain") == 0
    out = capsys.readouterr().out
    assert out.startswith("No confident answer:") and "Plausible options:" in out and "Not medical advice" in out
    assert "Answer:" not in out


@pytest.mark.parametrize("args, message", [
    (["Which?", "--options", "A) heart"], "found 1 option"),
    (["Which?", "--options", "A) a B) b C) c D) d E) e F) f"], "found 6 options"),
    (["Which?", "--option", "a", "--option", "b", "--option", "c", "--option", "d", "--option", "e", "--option", "f"],
     "found 6 options"),
    (["   ", "--option", "a", "--option", "b"], "question is empty"),
    (["Which?", "--options", "heart or lung"], "no option markers"),
    (["Which?"], "no options given"),
    (["Which?", "--option", "a", "--option", "b", "--threads", "many"], "--threads"),
])
def test_ask_bad_input_is_a_clear_error(tiny_dir, capsys, args, message):
    assert main(["ask", *args, "--model", tiny_dir]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err


def test_ask_rag_with_a_missing_index_is_a_clear_error(tiny_dir, tmp_path, capsys):
    assert ask(tiny_dir, "Which?", "--option", "a", "--option", "b", "--rag", str(tmp_path / "no-index")) == 2
    assert capsys.readouterr().err.startswith("error: ")


# ---------------------------------------------------------------------------- predict


def predict(tiny_dir, src, out, *args):
    return main(["predict", str(src), "--out", str(out), "--model", tiny_dir, "--device", "cpu",
                 "--threads", "0", "--no-progress", *args])


def test_predict_writes_rows_keyed_by_input_id_and_resumes(tiny_dir, tmp_path, capsys, count_scored):
    src = write_jsonl(tmp_path / "dev.jsonl", medmcqa_rows(12))
    out = tmp_path / "preds.jsonl"
    assert predict(tiny_dir, src, out, "--limit", "5", "--batch-size", "2") == 0
    first = out.read_text().splitlines()
    assert len(first) == 5 and sorted(count_scored) == [f"item-{i:03d}" for i in range(5)]
    count_scored.clear()
    assert predict(tiny_dir, src, out, "--batch-size", "4") == 0
    printed = capsys.readouterr().out
    lines = out.read_text().splitlines()
    assert lines[:5] == first  # finished rows untouched
    assert sorted(count_scored) == [f"item-{i:03d}" for i in range(5, 12)]  # only the new ids were scored
    rows = [json.loads(line) for line in lines]
    assert [r["id"] for r in rows] == [f"item-{i:03d}" for i in range(12)]
    assert all(r["gold_letter"] == "ABCD"[i % 4] and r["correct"] == (r["answer_letter"] == r["gold_letter"])
               for i, r in enumerate(rows))
    assert "5 already in" in printed and "accuracy" in printed and "12 rows for this input" in printed
    count_scored.clear()
    assert predict(tiny_dir, src, out) == 0 and count_scored == []  # nothing left to do


def test_predict_recovers_from_a_torn_last_line(tiny_dir, tmp_path, capsys):
    src = write_jsonl(tmp_path / "dev.jsonl", medmcqa_rows(4))
    out = tmp_path / "preds.jsonl"
    assert predict(tiny_dir, src, out, "--limit", "2") == 0
    with open(out, "a") as f:
        f.write('{"id": "item-002", "quest')  # killed mid-write
    assert predict(tiny_dir, src, out) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["item-000", "item-001", "item-002", "item-003"]
    assert "incomplete last line" in capsys.readouterr().out


def test_predict_refuses_to_mix_models_in_one_output(tiny_dir, tmp_path, capsys):
    src = write_jsonl(tmp_path / "dev.jsonl", medmcqa_rows(3))  # cop 1-3 only: base must be given
    out = tmp_path / "preds.jsonl"
    out.write_text(json.dumps({"id": "item-000", "model": "other-model"}) + "\n")
    assert predict(tiny_dir, src, out, "--cop-base", "1") == 2
    assert "other-model" in capsys.readouterr().err
    assert predict(tiny_dir, src, out, "--cop-base", "1", "--no-resume") == 0  # explicit restart overwrites
    assert len(out.read_text().splitlines()) == 3


def test_predict_csv_unlabelled_with_explanations(tiny_dir, tmp_path, capsys):
    src = tmp_path / "questions.csv"
    src.write_text('id,question,options\nq1,Which organ?,"[""heart"", ""lung""]"\nq2,Which drug?,'
                   '"[""insulin"", ""acid"", ""dose""]"\n', encoding="utf-8")
    out = tmp_path / "preds.jsonl"
    assert predict(tiny_dir, src, out, "--explain", "--max-new-tokens", "4") == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["q1", "q2"] and [len(r["probabilities"]) for r in rows] == [2, 3]
    assert all(isinstance(r["explanation"], str) and r["gold_letter"] is None for r in rows)
    assert "accuracy" not in capsys.readouterr().out


def test_predict_non_utf8_file_is_a_clear_error(tiny_dir, tmp_path, capsys):
    src = tmp_path / "latin1.jsonl"
    src.write_bytes('{"question": "Caf\u00e9?", "options": ["a", "b"]}\n'.encode("latin-1"))
    assert predict(tiny_dir, src, tmp_path / "out.jsonl") == 2
    err = capsys.readouterr().err
    assert "not UTF-8" in err and "re-save it as UTF-8" in err
    assert not (tmp_path / "out.jsonl").exists()


def test_predict_bad_arguments(tiny_dir, tmp_path, capsys):
    src = write_jsonl(tmp_path / "dev.jsonl", medmcqa_rows(2))
    assert predict(tiny_dir, src, tmp_path / "o.jsonl", "--batch-size", "0") == 2
    assert predict(tiny_dir, src, src) == 2
    assert predict(tiny_dir, tmp_path / "missing.jsonl", tmp_path / "o.jsonl") == 2
    err = capsys.readouterr().err
    assert "--batch-size" in err and "input file" in err and "file not found" in err


def test_ask_with_rag_puts_retrieved_passages_in_the_answer(tiny_dir, tmp_path, capsys):
    from medqa.rag import build_index

    notes = write_jsonl(tmp_path / "notes.jsonl", [
        {"id": "digoxin", "text": "Digoxin inhibits the sodium potassium ATPase; toxicity causes yellow vision."},
        {"id": "warfarin", "text": "Warfarin antagonises vitamin K epoxide reductase and is monitored with the INR."},
        {"id": "kawasaki", "text": "Kawasaki disease is treated with intravenous immunoglobulin and aspirin."}])
    build_index([notes], tmp_path / "index", embed_model="hashing:256")
    assert ask(tiny_dir, "Which drug causes yellow vision?", "--option", "Digoxin", "--option", "Warfarin",
               "--rag", str(tmp_path / "index"), "--rag-k", "2", "--json") == 0
    res = AnswerResult.model_validate_json(capsys.readouterr().out)
    assert 1 <= len(res.evidence) <= 2 and res.evidence[0].id.startswith("digoxin")
    assert set(res.citations) <= {p.id for p in res.evidence}


@pytest.mark.parametrize("args, message", [
    (["--max-new-tokens", "0"], "--max-new-tokens"),
    (["--abstain-below", "1.5"], "--abstain-below"),
    (["--rag-k", "-1"], "--rag-k"),
    (["--threads", "-2"], "--threads"),
])
def test_bad_numbers_fail_before_the_model_loads(tmp_path, capsys, args, message):
    # the model path does not exist: reaching the model loader would give a different error
    assert main(["ask", "Which?", "--option", "a", "--option", "b", "--model", str(tmp_path / "none"), *args]) == 2
    assert message in capsys.readouterr().err


def test_ask_reads_the_question_from_stdin(tiny_dir, capsys, monkeypatch):
    import io

    monkeypatch.setattr("sys.stdin", io.StringIO("A long vignette...\nWhich organ?\nA) heart\nB) lung\n"))
    assert ask(tiny_dir, "-", "--json", "--no-explain") == 0
    res = AnswerResult.model_validate_json(capsys.readouterr().out)
    assert res.question == "A long vignette...\nWhich organ?" and res.options == ["heart", "lung"]
