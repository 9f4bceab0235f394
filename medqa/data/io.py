"""Read benchmark rows from local files or the Hugging Face Hub and turn them into :class:`MCQItem` s.

Everything that can go wrong with user data becomes a :class:`DataError` with ``where`` set to
``file:LINE`` (JSONL lines and CSV rows, 1-based physical line numbers) or ``file[INDEX]`` (0-based index in a
JSON array, Parquet table or Hub split), so the user can jump straight to the offending row.
"""
from __future__ import annotations

import csv
import io
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..records import DataError, MCQItem, MedQAError
from .adapters import AdapterContext, detect_cop_base, detect_dataset, expected_fields_text, get_adapter

SUPPORTED_FORMATS: dict[str, str] = {
    ".jsonl": "one JSON object per line",
    ".json": "a JSON array of objects (JSON lines also accepted)",
    ".csv": "comma-separated with a header row",
    ".parquet": "Apache Parquet",
}
ON_BAD_ROW = ("error", "skip")
# Extensions that mark a string as a file path even when the file does not exist (so a typo gives
# "file not found", not a confusing Hub error).
_FILE_LIKE = set(SUPPORTED_FORMATS) | {".txt", ".tsv", ".xlsx", ".gz", ".zip", ".arrow", ".xml", ".yaml", ".yml"}
_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?")


@dataclass
class Loaded:
    """The items read from one source plus what the user should know about how they were read."""

    items: list[MCQItem]
    dataset: str
    source: str
    skipped: list[DataError] = field(default_factory=list)
    n_read: int = 0  # rows examined (items + skipped)
    notes: list[str] = field(default_factory=list)  # decisions taken, e.g. the MedMCQA cop base
    cop_base: int | None = None  # MedMCQA only: the cop base actually used


@dataclass
class RawRow:
    """One source row before adaptation: its location and either the dict or why it could not be read."""

    where: str
    data: dict[str, Any] | None = None
    error: DataError | None = None


# --------------------------------------------------------------------------- local files


def read_text(path: Path) -> str:
    """The file as text; non-UTF-8 bytes are reported with byte offset and line, not a traceback."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise DataError(
            f"file is not UTF-8 text (byte 0x{data[e.start]:02x} at byte offset {e.start}, line {line}); "
            "re-save it as UTF-8",
            f"{path}:{line}",
        ) from None


def _object_row(obj: Any, where: str) -> RawRow:
    if isinstance(obj, dict):
        return RawRow(where, obj)
    return RawRow(where, error=DataError(f"expected a JSON object, got {type(obj).__name__}", where))


def parse_jsonl(path: Path, text: str) -> list[RawRow]:
    """JSON lines; blank lines are ignored, a malformed line is a bad row (it may be skipped)."""
    rows = []
    for lineno, line in enumerate(text.split("\n"), start=1):  # not splitlines(): U+2028 is valid inside JSON
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            rows.append(RawRow(where, error=DataError(f"malformed JSON ({e.msg}, column {e.colno})", where)))
            continue
        rows.append(_object_row(obj, where))
    return rows


def parse_json(path: Path, text: str) -> list[RawRow]:
    """A JSON array, a ``{id: row}`` object (PubMedQA's ``ori_pqal.json``), or JSON lines saved as .json.

    MedMCQA's original ``train.json``/``dev.json`` are really JSON lines, hence the fallback.
    """
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        if e.msg == "Extra data" and text.lstrip().startswith("{"):
            return parse_jsonl(path, text)
        raise DataError(f"malformed JSON ({e.msg}, column {e.colno})", f"{path}:{e.lineno}") from None
    if isinstance(obj, list):
        return [_object_row(o, f"{path}[{i}]") for i, o in enumerate(obj)]
    if isinstance(obj, dict) and obj and all(isinstance(v, dict) for v in obj.values()):
        return [RawRow(f"{path}[{k}]", {"id": k, **v} if "id" not in v else v) for k, v in obj.items()]
    if isinstance(obj, dict) and ("question" in obj or "QUESTION" in obj):
        return [RawRow(f"{path}[0]", obj)]
    raise DataError(
        f"expected a JSON array of question objects, got a JSON {type(obj).__name__}", str(path)
    )


def parse_csv(path: Path, text: str) -> list[RawRow]:
    """CSV with a header row; ``where`` is the physical line the record starts on (header = line 1)."""
    reader = csv.reader(io.StringIO(text, newline=""))
    header: list[str] | None = None
    rows: list[RawRow] = []
    while True:
        start = reader.line_num + 1
        try:
            record = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            raise DataError(f"malformed CSV ({e})", f"{path}:{reader.line_num}") from None
        if not any(cell.strip() for cell in record):
            continue
        if header is None:
            header = [h.strip() for h in record]
            continue
        where = f"{path}:{start}"
        if len(record) != len(header):
            msg = f"has {len(record)} columns but the header has {len(header)}"
            rows.append(RawRow(where, error=DataError(msg, where)))
            continue
        rows.append(RawRow(where, dict(zip(header, record))))
    return rows


def parse_parquet(path: Path) -> list[RawRow]:
    """A Parquet table, one row per item (e.g. a file downloaded from the Hub)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise MedQAError("reading .parquet files needs pyarrow: pip install pyarrow") from None
    try:
        table = pq.read_table(path)
    except Exception as e:  # pyarrow raises ArrowInvalid/OSError subclasses for corrupt files
        raise DataError(f"not a readable Parquet file ({e})", str(path)) from None
    return [RawRow(f"{path}[{i}]", row) for i, row in enumerate(table.to_pylist())]


def read_rows(path: Path) -> list[RawRow]:
    """All rows of a local file, in order; file-level problems raise, row-level ones become bad rows."""
    if not path.exists():
        raise DataError("file not found", str(path))
    if path.is_dir():
        raise DataError("is a directory; expected a data file", str(path))
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_FORMATS:
        supported = "; ".join(f"{ext} ({desc})" for ext, desc in SUPPORTED_FORMATS.items())
        raise DataError(f"unsupported file format {suffix or '(no extension)'}; supported: {supported}", str(path))
    try:
        if suffix == ".parquet":
            return parse_parquet(path)
        text = read_text(path)
    except OSError as e:
        raise DataError(f"cannot read file ({e.strerror or e})", str(path)) from None
    return {".jsonl": parse_jsonl, ".json": parse_json, ".csv": parse_csv}[suffix](path, text)


def is_local_source(source: str | Path) -> bool:
    """True for file paths (existing or not), False for things that look like Hub ids (``owner/name``)."""
    if isinstance(source, Path):
        return True
    text = str(source)
    if Path(text).expanduser().exists() or text.startswith((".", "/", "~")) or "\\" in text:
        return True
    return Path(text).suffix.lower() in _FILE_LIKE or not _HUB_ID.fullmatch(text)


# --------------------------------------------------------------------------- Hugging Face Hub


class _HubRows(Sequence):
    """A Hub split viewed as RawRows, converted lazily so ``limit`` does not touch every row."""

    def __init__(self, ds: Any, label: str):
        self.ds, self.label = ds, label

    def __len__(self) -> int:
        return len(self.ds)

    def __getitem__(self, i: int) -> RawRow:  # type: ignore[override]
        if i < 0 or i >= len(self):
            raise IndexError(i)
        return RawRow(f"{self.label}[{i}]", dict(self.ds[i]))


def hub_label(dataset_id: str, config: str | None, split: str) -> str:
    return f"{dataset_id}{'/' + config if config else ''}:{split}"


def _hub_error(dataset_id: str, config: str | None, split: str, e: Exception) -> MedQAError:
    """A message that says whether the Hub was unreachable, and what to do instead."""
    what = f"'{dataset_id}'" + (f" (config {config!r}, split {split!r})" if config else f" (split {split!r})")
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes") or os.environ.get(
        "HF_DATASETS_OFFLINE", ""
    ).lower() in ("1", "true", "yes")
    unreachable = offline or isinstance(e, ConnectionError) or any(
        word in type(e).__name__ for word in ("Connection", "Timeout", "Offline")
    )
    hint = (
        f"{dataset_id!r} is not a local file, so it was read as a Hugging Face Hub dataset id. "
        f"Pass a local .jsonl/.json/.csv/.parquet file instead, or set MEDQA_DATA_DIR to the benchmark data folder"
    )
    if unreachable:
        reason = "HF_HUB_OFFLINE is set" if offline else "no network?"
        return MedQAError(f"cannot reach the Hugging Face Hub to load {what} ({reason}: {e}). {hint}")
    return MedQAError(f"could not load {what} from the Hugging Face Hub ({type(e).__name__}: {e}). {hint}")


def read_hub_rows(dataset_id: str, split: str, config: str | None = None) -> Sequence[RawRow]:
    """Rows of a Hub dataset split via ``datasets.load_dataset`` (cached after the first download)."""
    try:
        import datasets
    except ImportError:
        raise MedQAError(
            f"loading {dataset_id!r} from the Hugging Face Hub needs `datasets` (pip install datasets); "
            "or pass a local file"
        ) from None
    try:
        ds = datasets.load_dataset(dataset_id, config, split=split)
    except Exception as e:  # network, auth, unknown id/config/split: all fixable by the user
        raise _hub_error(dataset_id, config, split, e) from e
    return _HubRows(ds, hub_label(dataset_id, config, split))


# --------------------------------------------------------------------------- rows -> items


def _detect(rows: Sequence[RawRow], label: str) -> str:
    """The dataset name from the first readable row's field names."""
    first = next((r for r in rows if r.data is not None), None)
    if first is None:
        if rows:
            raise rows[0].error or DataError("no readable rows", label)
        raise DataError("contains no rows", label)
    name = detect_dataset(first.data)
    if name is None:
        fields = ", ".join(map(str, first.data)) or "none"
        raise DataError(
            f"cannot tell which dataset this is: the first row has fields [{fields}]. "
            f"Expected fields per dataset: {expected_fields_text()}. Rename the fields or pass --dataset",
            label,
        )
    return name


def _cop_base(rows: Sequence[RawRow], given: int | None, default: int | None, label: str) -> tuple[int, str]:
    """Explicit ``cop_base`` wins, then the source's convention (Hub: 0), then a whole-file scan."""
    if given is not None:
        return given, f"MedMCQA cop read as {given}-based (cop_base given)"
    if default is not None:
        return default, f"MedMCQA cop read as {default}-based (Hugging Face Hub convention)"
    values = (r.data.get("cop") for r in rows if r.data is not None)
    return detect_cop_base(values, label)


def _adapt(adapter: Any, raw: RawRow, ctx: AdapterContext) -> MCQItem:
    """Run one adapter; stamp ``where`` on its errors and turn stray exceptions into DataErrors."""
    if raw.error is not None:
        raise raw.error
    try:
        return adapter(raw.data, ctx)
    except DataError as e:
        if e.where is None:
            raise DataError(e.reason, raw.where, e.field) from None
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        raise DataError(f"unexpected value ({type(e).__name__}: {e})", raw.where) from None


def make_ids_unique(items: list[MCQItem]) -> int:
    """Suffix repeated ids with ``#2``, ``#3``...; returns how many were renamed.

    Predictions and metrics are keyed by id, so two items with one id would silently collapse.
    """
    seen: dict[str, int] = {}
    renamed = 0
    for item in items:
        n = seen.get(item.id, 0) + 1
        seen[item.id] = n
        if n > 1:
            item.id = f"{item.id}#{n}"
            renamed += 1
    return renamed


def build_loaded(
    rows: Sequence[RawRow],
    label: str,
    dataset: str | None,
    *,
    cop_base: int | None = None,
    default_cop_base: int | None = None,
    on_bad_row: str = "error",
    limit: int | None = None,
) -> Loaded:
    """Adapt ``rows`` into a :class:`Loaded`, raising or collecting bad rows per ``on_bad_row``."""
    name = dataset or _detect(rows, label)
    adapter = get_adapter(name)
    notes: list[str] = [] if dataset else [f"dataset detected as {name!r} from the field names"]
    base = None
    if name == "medmcqa":
        base, reason = _cop_base(rows, cop_base, default_cop_base, label)
        notes.append(reason)
    items: list[MCQItem] = []
    skipped: list[DataError] = []
    n_read = 0
    for index, raw in enumerate(rows):
        if limit is not None and len(items) >= limit:
            break
        n_read += 1
        try:
            items.append(_adapt(adapter, raw, AdapterContext(name, raw.where, index, base)))
        except DataError as e:
            if on_bad_row == "error":
                raise
            skipped.append(e)
    renamed = make_ids_unique(items)
    if renamed:
        notes.append(f"{renamed} repeated ids made unique with a '#N' suffix")
    return Loaded(items, name, label, skipped, n_read, notes, base)


def load_items(
    source: str | Path,
    dataset: str | None = None,
    split: str | None = None,
    *,
    cop_base: int | None = None,
    on_bad_row: str = "error",
    limit: int | None = None,
    config: str | None = None,
) -> Loaded:
    """Load MCQ items from a local file (.json/.jsonl/.csv/.parquet) or a Hub dataset id.

    ``dataset`` None auto-detects from the first row's field names.  ``split``/``config`` apply to Hub ids
    only (split defaults to ``"train"``).  ``cop_base`` overrides MedMCQA's detected answer base.
    ``on_bad_row="error"`` raises the first bad row; ``"skip"`` collects them in ``Loaded.skipped``.
    """
    if on_bad_row not in ON_BAD_ROW:
        raise MedQAError(f"on_bad_row must be one of {', '.join(ON_BAD_ROW)}, not {on_bad_row!r}")
    if cop_base not in (None, 0, 1):
        raise MedQAError(f"cop_base must be 0 or 1, not {cop_base!r}")
    if limit is not None and limit < 0:
        raise MedQAError(f"limit must be >= 0, not {limit}")
    if dataset is not None:
        get_adapter(dataset)  # fail on a typo before reading anything
    if is_local_source(source):
        rows: Sequence[RawRow] = read_rows(Path(source).expanduser())
        label, default_base = str(source), None
    else:
        split = split or "train"
        rows, label, default_base = read_hub_rows(str(source), split, config), hub_label(str(source), config, split), 0
    return build_loaded(
        rows, label, dataset, cop_base=cop_base, default_cop_base=default_base, on_bad_row=on_bad_row, limit=limit
    )


def merge_loaded(parts: Sequence[Loaded]) -> Loaded:
    """Concatenate several loads (e.g. MMLU's subjects or dev+val) into one, keeping ids unique."""
    if not parts:
        raise MedQAError("nothing to merge: no sources were loaded")
    datasets_ = {p.dataset for p in parts}
    notes = list(dict.fromkeys(n for p in parts for n in p.notes))
    merged = Loaded(
        items=[item for p in parts for item in p.items],
        dataset=parts[0].dataset if len(datasets_) == 1 else "mixed",
        source=" + ".join(p.source for p in parts),
        skipped=[e for p in parts for e in p.skipped],
        n_read=sum(p.n_read for p in parts),
        notes=notes,
        cop_base=next((p.cop_base for p in parts if p.cop_base is not None), None),
    )
    renamed = make_ids_unique(merged.items)
    if renamed:
        merged.notes.append(f"{renamed} ids repeated across sources made unique with a '#N' suffix")
    return merged
