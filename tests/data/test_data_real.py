"""Integration: every real benchmark file in ../shared/data, the task table and the CLI."""
from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from medqa.cli import main
from medqa.data import TASKS, dedup_against, find_data_dir, inspect_items, load_items, resolve_task
from medqa.records import MedQAError

# Row counts and detected adapters from PROVENANCE.md ("Layout").
EXPECTED = {
    "medmcqa/dev_public.jsonl": ("medmcqa", 1999),
    "medmcqa/train_cardio_subset.jsonl": ("medmcqa", 1861),
    "medqa/test_sample.jsonl": ("medqa", 110),
    "mmlu/dev.jsonl": ("mmlu", 30),
    "mmlu/val.jsonl": ("mmlu", 123),
    "mmlu/test_sample.jsonl": ("mmlu", 93),
    "pubmedqa/trainval.jsonl": ("pubmedqa", 500),
}
# Letter counts of dev_public.jsonl, counted from the raw cop values (656/543/414/386 of 1999).
# NB: PROVENANCE's "A 32.2 / B 25.9 / C 22.1 / D 19.7 %" is for the full 4183-row dev split, not this 48 %.
DEV_PUBLIC_COUNTS = {"A": 656, "B": 543, "C": 414, "D": 386}


@pytest.fixture(scope="module")
def loaded_all(shared_data: Path) -> dict:
    return {rel: load_items(shared_data / rel) for rel in EXPECTED}


def test_every_shared_file_is_covered(shared_data):
    on_disk = {p.relative_to(shared_data).as_posix() for p in shared_data.rglob("*.jsonl")}
    assert on_disk == set(EXPECTED)


@pytest.mark.parametrize("rel", list(EXPECTED))
def test_real_file_parses_with_autodetect(loaded_all, rel):
    dataset, n = EXPECTED[rel]
    loaded = loaded_all[rel]
    assert (loaded.dataset, len(loaded.items), loaded.n_read, loaded.skipped) == (dataset, n, n, [])
    assert all(it.answer is not None and it.source == dataset for it in loaded.items)
    assert len({it.id for it in loaded.items}) == n


def test_medmcqa_is_one_based_and_answer_distribution(loaded_all, shared_data):
    loaded = loaded_all["medmcqa/dev_public.jsonl"]
    assert loaded.cop_base == 1
    assert Counter(it.answer_letter for it in loaded.items) == DEV_PUBLIC_COUNTS
    raw = [json.loads(line) for line in (shared_data / "medmcqa/dev_public.jsonl").open(encoding="utf-8")]
    assert all(it.answer == r["cop"] - 1 and it.id == r["id"] for it, r in zip(loaded.items, raw))
    dist = inspect_items(loaded)["answers"]["distribution"]
    assert [dist[L]["pct"] for L in "ABCD"] == [32.8, 27.2, 20.7, 19.3]


def test_other_distributions_match_provenance(loaded_all):
    """PROVENANCE's numbers hold for the files that are the full splits (not the samples)."""
    def pct(rel):
        d = inspect_items(loaded_all[rel])["answers"]["distribution"]
        return [d[k]["pct"] for k in d]
    assert pct("medmcqa/train_cardio_subset.jsonl") == [30.2, 24.9, 22.5, 22.5]
    assert pct("mmlu/val.jsonl") == [14.6, 30.1, 22.0, 33.3]
    assert pct("pubmedqa/trainval.jsonl") == [55.2, 33.8, 11.0]


def test_real_items_carry_fields(loaded_all):
    pub = loaded_all["pubmedqa/trainval.jsonl"].items[0]
    assert pub.id == "10808977" and pub.context.startswith("Telephone counseling") and pub.explanation
    medqa = loaded_all["medqa/test_sample.jsonl"].items[0]
    assert medqa.answer_letter == "C" and medqa.options[2] == "Common iliac artery aneurysm"
    assert {it.subject for it in loaded_all["mmlu/val.jsonl"].items} == {
        "anatomy", "clinical_knowledge", "college_biology", "college_medicine", "medical_genetics",
        "professional_medicine"}


def test_train_and_dev_do_not_overlap(loaded_all):
    _, dropped = dedup_against(loaded_all["medmcqa/train_cardio_subset.jsonl"].items,
                               loaded_all["medmcqa/dev_public.jsonl"].items, within=False)
    assert dropped == 0  # PROVENANCE: no question-text overlap between train_cardio and dev


def test_resolve_task_local(shared_data):
    assert len(resolve_task("medmcqa", "eval", data_dir=shared_data).items) == 1999
    train = resolve_task("mmlu_medical", "train", data_dir=shared_data)
    assert len(train.items) == 30 + 123 and train.dataset == "mmlu" and "+" in train.source
    assert len(resolve_task("pubmedqa", data_dir=shared_data, limit=7).items) == 7
    with pytest.raises(MedQAError, match="medmcqa, medqa, pubmedqa, mmlu_medical"):
        resolve_task("usmle", data_dir=shared_data)
    with pytest.raises(MedQAError, match="no separate train"):
        resolve_task("pubmedqa", "train", data_dir=shared_data)


def test_task_table_points_at_real_files(shared_data):
    assert set(TASKS) == {"medmcqa", "medqa", "pubmedqa", "mmlu_medical"}
    for spec in TASKS.values():
        assert (shared_data / spec.eval_file).is_file()
        assert all((shared_data / f).is_file() for f in spec.train_files)
    assert TASKS["mmlu_medical"].hub_id == "cais/mmlu" and len(TASKS["mmlu_medical"].hub_configs) == 6


def test_find_data_dir(shared_data, monkeypatch, tmp_path):
    monkeypatch.delenv("MEDQA_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)  # not under the repo: found via the package location
    assert find_data_dir() == shared_data
    monkeypatch.setenv("MEDQA_DATA_DIR", str(tmp_path))
    assert find_data_dir() == tmp_path
    monkeypatch.setenv("MEDQA_DATA_DIR", str(tmp_path / "missing"))
    with pytest.raises(MedQAError, match="MEDQA_DATA_DIR"):
        find_data_dir()


def test_cli_inspect_text(shared_data, capsys):
    assert main(["data", "inspect", str(shared_data / "medmcqa/dev_public.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "items:    1,999" in out and "1-based" in out
    assert "A:     656   32.8 %" in out and "D:     386   19.3 %" in out
    assert "Dental" in out and "validation problems: none" in out


def test_cli_inspect_json_and_task_name(shared_data, repo_root, capsys, monkeypatch):
    monkeypatch.setenv("MEDQA_DATA_DIR", str(shared_data))
    assert main(["data", "inspect", "pubmedqa", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["n_items"] == 500 and report["context_coverage"]["pct"] == 100.0
    assert report["answers"]["distribution"]["A"] == {"count": 276, "pct": 55.2, "label": "yes"}
    monkeypatch.chdir(repo_root)  # a task name wins over the package *directory* medqa/
    assert main(["data", "inspect", "medqa", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_items"] == 110


def test_cli_errors_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q?", "opa": "a", "opb": "b", "opc": "c", "opd": "d", "cop": 2}\n',
                   encoding="utf-8")
    assert main(["data", "inspect", str(bad)]) == 2
    assert "--cop-base" in capsys.readouterr().err
    assert main(["data", "inspect", str(bad), "--cop-base", "1"]) == 0
    skip = tmp_path / "skip.jsonl"
    skip.write_text(bad.read_text() + "{broken\n", encoding="utf-8")
    assert main(["data", "inspect", str(skip), "--cop-base", "0", "--on-bad-row", "skip"]) == 0
    assert f"{skip}:2" in capsys.readouterr().out


def test_cli_entry_point_subprocess(shared_data, repo_root):
    """`python -m medqa data inspect FILE` end to end, as a user runs it."""
    out = subprocess.run([sys.executable, "-m", "medqa", "data", "inspect",
                          str(shared_data / "mmlu/dev.jsonl")], cwd=repo_root, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "items:    30" in out.stdout
