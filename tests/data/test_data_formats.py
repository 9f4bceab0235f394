"""load_items on small synthetic files: formats, MedMCQA cop base, bad rows and file-level errors."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from medqa.data import load_items
from medqa.records import DataError, MCQItem, MedQAError


def mmrow(i: int, cop: object = 1, **over: object) -> dict:
    row = {"question": f"Question {i}?", "exp": "", "cop": cop, "opa": "a", "opb": "b", "opc": "c", "opd": "d",
           "subject_name": "Anatomy", "topic_name": None, "id": f"id{i}", "choice_type": "single"}
    row.update(over)
    return row


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


ONE_BASED = [mmrow(0, 4), mmrow(1, 1), mmrow(2, 2)]  # contains a 4 -> 1-based
ZERO_BASED = [mmrow(0, 0), mmrow(1, 3), mmrow(2, 2)]  # contains a 0 -> 0-based
AMBIGUOUS = [mmrow(0, 1), mmrow(1, 2), mmrow(2, 3)]


# --------------------------------------------------------------------------- formats


def test_jsonl(tmp_path):
    loaded = load_items(write_jsonl(tmp_path / "m.jsonl", ONE_BASED))
    assert loaded.dataset == "medmcqa" and loaded.n_read == 3 and not loaded.skipped
    assert [it.answer for it in loaded.items] == [3, 0, 1]
    assert [it.id for it in loaded.items] == ["id0", "id1", "id2"]


def test_json_array_and_json_lines_named_json(tmp_path):
    array = tmp_path / "a.json"
    array.write_text(json.dumps(ONE_BASED, indent=2), encoding="utf-8")
    lines = write_jsonl(tmp_path / "l.json", ONE_BASED)  # the original MedMCQA release does this
    for path in (array, lines):
        assert [it.answer for it in load_items(path).items] == [3, 0, 1]


def test_json_object_keyed_by_id(tmp_path):
    """PubMedQA's ori_pqal.json: {pmid: row}."""
    path = tmp_path / "p.json"
    rows = {"11": {"QUESTION": "q1?", "CONTEXTS": ["c"], "final_decision": "no"},
            "22": {"QUESTION": "q2?", "CONTEXTS": ["c"], "final_decision": "yes"}}
    path.write_text(json.dumps(rows), encoding="utf-8")
    loaded = load_items(path)
    assert loaded.dataset == "pubmedqa"
    assert [(it.id, it.answer) for it in loaded.items] == [("11", 1), ("22", 0)]


def test_csv_with_multiline_cell_reports_physical_line(tmp_path):
    path = tmp_path / "mmlu.csv"
    path.write_text(
        'question,A,B,C,D,answer\n"Two\nline question?",a,b,c,d,B\nQ2?,a,,c,d,A\n', encoding="utf-8"
    )
    with pytest.raises(DataError) as e:
        load_items(path)
    assert (e.value.where, e.value.field) == (f"{path}:4", "B")  # header=1, record 1 spans lines 2-3
    loaded = load_items(path, on_bad_row="skip")
    assert loaded.items[0].question == "Two\nline question?" and loaded.items[0].answer == 1
    assert len(loaded.skipped) == 1


def test_csv_medmcqa_string_cops(tmp_path):
    path = tmp_path / "m.csv"
    header = "question,opa,opb,opc,opd,cop,exp,id\n"
    path.write_text(header + "Q1?,a,b,c,d,4,,x1\nQ2?,a,b,c,d,1,why,x2\n", encoding="utf-8")
    loaded = load_items(path)
    assert loaded.cop_base == 1 and [it.answer for it in loaded.items] == [3, 0]


def test_parquet_hub_style_zero_based(tmp_path):
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "m.parquet"
    pq.write_table(pa.Table.from_pylist(ZERO_BASED), path)
    loaded = load_items(path)
    assert loaded.cop_base == 0 and [it.answer for it in loaded.items] == [0, 3, 2]
    assert any("0-based" in n for n in loaded.notes)


def test_parquet_bad_row_where_is_index(tmp_path):
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "m.parquet"
    pq.write_table(pa.Table.from_pylist([mmrow(0, 0), mmrow(1, 9)]), path)
    with pytest.raises(DataError) as e:
        load_items(path)
    assert (e.value.where, e.value.field) == (f"{path}[1]", "cop")


def test_generic_round_trip_and_limit(tmp_path):
    items = [MCQItem(f"g{i}", f"Q{i}?", ["x", "y", "z"], i % 3, source="mine") for i in range(5)]
    path = write_jsonl(tmp_path / "g.jsonl", [it.to_dict() for it in items])
    assert load_items(path).items == items
    limited = load_items(path, limit=2)
    assert [it.id for it in limited.items] == ["g0", "g1"] and limited.n_read == 2


def test_repeated_ids_made_unique(tmp_path):
    path = write_jsonl(tmp_path / "m.jsonl", [mmrow(0, 4), mmrow(0, 1)])
    loaded = load_items(path)
    assert [it.id for it in loaded.items] == ["id0", "id0#2"]


# --------------------------------------------------------------------------- MedMCQA cop base


def test_cop_base_detected_and_recorded(tmp_path):
    one = load_items(write_jsonl(tmp_path / "1.jsonl", ONE_BASED))
    zero = load_items(write_jsonl(tmp_path / "0.jsonl", ZERO_BASED))
    assert (one.cop_base, zero.cop_base) == (1, 0)
    assert any("1-based" in n for n in one.notes) and any("0-based" in n for n in zero.notes)


def test_ambiguous_cop_is_an_error_until_overridden(tmp_path):
    path = write_jsonl(tmp_path / "amb.jsonl", AMBIGUOUS)
    with pytest.raises(DataError) as e:
        load_items(path)
    assert e.value.field == "cop" and "--cop-base 1 or --cop-base 0" in str(e.value)
    assert [it.answer for it in load_items(path, cop_base=1).items] == [0, 1, 2]
    assert [it.answer for it in load_items(path, cop_base=0).items] == [1, 2, 3]


def test_cop_scan_covers_whole_file_not_just_limit(tmp_path):
    path = write_jsonl(tmp_path / "m.jsonl", [mmrow(0, 1), mmrow(1, 2), mmrow(2, 4)])
    assert load_items(path, limit=1).items[0].answer == 0  # the 4 on the last line decides 1-based


def test_override_turns_other_convention_into_bad_rows(tmp_path):
    path = write_jsonl(tmp_path / "m.jsonl", ZERO_BASED)
    loaded = load_items(path, cop_base=1, on_bad_row="skip")
    assert [e.where for e in loaded.skipped] == [f"{path}:1"]  # cop 0 is invalid 1-based


# --------------------------------------------------------------------------- bad rows


@pytest.mark.parametrize(
    "bad, field, message",
    [
        ({k: v for k, v in mmrow(1).items() if k != "question"}, "question", "missing field"),
        (mmrow(1, cop=7), "cop", "out of range"),
        (mmrow(1, opc="  "), "opc", "is empty"),
        (mmrow(1, cop="x"), "cop", "not an integer"),
    ],
)
def test_bad_row_reports_file_line_and_field(tmp_path, bad, field, message):
    path = write_jsonl(tmp_path / "m.jsonl", [mmrow(0, 4), bad, mmrow(2, 2)])
    with pytest.raises(DataError) as e:
        load_items(path)
    assert (e.value.where, e.value.field) == (f"{path}:2", field)
    assert message in str(e.value) and str(e.value).startswith(f"{path}:2 field '{field}'")


def test_skip_mode_collects_bad_rows(tmp_path):
    path = tmp_path / "m.jsonl"
    lines = [json.dumps(mmrow(0, 4)), "", json.dumps(mmrow(1, 9)), '{"question": "trunc', "[1, 2]",
             json.dumps(mmrow(2, opa=""))]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    loaded = load_items(path, on_bad_row="skip")
    assert len(loaded.items) == 1 and loaded.n_read == 5  # blank line is not a row
    assert [(e.where, e.field) for e in loaded.skipped] == [
        (f"{path}:3", "cop"), (f"{path}:4", None), (f"{path}:5", None), (f"{path}:6", "opa")]


def test_malformed_json_line_is_a_clean_error(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(mmrow(0, 4)) + "\n{not json}\n", encoding="utf-8")
    with pytest.raises(DataError) as e:
        load_items(path)
    assert e.value.where == f"{path}:2" and "malformed JSON" in str(e.value)


def test_malformed_json_array_file(tmp_path):
    path = tmp_path / "m.json"
    path.write_text('[\n {"question": "q"},\n {oops}\n]', encoding="utf-8")
    with pytest.raises(DataError) as e:
        load_items(path)
    assert e.value.where == f"{path}:3"


# --------------------------------------------------------------------------- file-level errors


def test_non_utf8_file(tmp_path):
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(json.dumps(mmrow(0, 4)).encode() + b"\n" + '{"question": "caf\xe9"}\n'.encode("latin-1"))
    with pytest.raises(DataError) as e:
        load_items(path)
    assert "not UTF-8" in str(e.value) and "line 2" in str(e.value) and "0xe9" in str(e.value)
    assert e.value.where == f"{path}:2"


def test_unknown_format_lists_supported(tmp_path):
    path = tmp_path / "data.xlsx"
    path.write_bytes(b"PK")
    with pytest.raises(DataError) as e:
        load_items(path)
    assert all(ext in str(e.value) for ext in (".jsonl", ".json", ".csv", ".parquet"))


def test_missing_file(tmp_path):
    with pytest.raises(DataError, match="file not found"):
        load_items(tmp_path / "nope.jsonl")
    with pytest.raises(DataError, match="file not found"):
        load_items("some/dir/nope.csv")  # a path-looking string is never sent to the Hub


def test_unrecognised_fields_name_file_fields_and_expectations(tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", [{"prompt": "p", "completion": "c"}])
    with pytest.raises(DataError) as e:
        load_items(path)
    msg = str(e.value)
    assert str(path) in msg and "prompt, completion" in msg
    assert all(name in msg for name in ("medmcqa:", "medqa:", "pubmedqa:", "mmlu:", "generic:", "answer_idx"))


def test_empty_file_and_bad_arguments(tmp_path):
    empty = tmp_path / "e.jsonl"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(DataError, match="no rows"):
        load_items(empty)
    for kwargs in ({"on_bad_row": "ignore"}, {"cop_base": 2}, {"dataset": "medmcqqa"}):
        with pytest.raises(MedQAError):
            load_items(empty, **kwargs)


def test_hub_offline_is_a_clean_medqa_error(repo_root):
    """The real Hub path can't run here; offline it must fail as a MedQAError suggesting a local file.

    Runs in a subprocess because huggingface_hub reads HF_HUB_OFFLINE at import time."""
    code = (
        "from medqa.data import load_items\n"
        "from medqa.records import MedQAError\n"
        "try:\n    load_items('openlifescienceai/medmcqa', split='validation')\n"
        "except MedQAError as e:\n    print('MEDQAERROR', e)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", code], cwd=repo_root, env=env, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("MEDQAERROR cannot reach the Hugging Face Hub")
    assert "local" in out.stdout and "Traceback" not in out.stderr
