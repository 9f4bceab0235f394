"""Turn corpus sources into documents (id, text, source) for indexing.

Sources:

* ``.md`` / ``.markdown`` / ``.txt`` files: one document each; id = the file name (or the path relative to
  a folder given as the source).  Markdown markup is lightly stripped; headings become sentences.
* folders: every ``.md``/``.markdown``/``.txt`` file below them, in sorted order.
* ``.jsonl`` / ``.json`` / ``.csv`` text records: rows with a text field (``text``, ``content``, ``passage``,
  ``abstract``, ``body``, ``contents``), an optional id (``id``, ``doc_id``, ``pmid``, ``_id``) and title.
  A row without an id gets ``<file stem>:<sha1 of text>``.
* the same formats holding benchmark rows (anything :func:`medqa.data.load_items` reads): PubMedQA rows give
  their abstracts (``contexts``), other MCQ datasets their explanations (``explanations``; use a *training*
  split only: explanations from evaluated items reveal the answers).  Id = ``<dataset>:<item id>``.

``kind`` forces one reading (``text``, ``records``, ``contexts``, ``explanations``); ``auto`` decides per file.
"""
from __future__ import annotations

import hashlib
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

from ..records import DataError, MedQAError

log = logging.getLogger(__name__)

KINDS = ("auto", "text", "records", "contexts", "explanations")
TEXT_SUFFIXES = (".md", ".markdown", ".txt")
RECORD_SUFFIXES = (".jsonl", ".json", ".csv")
TEXT_FIELDS = ("text", "content", "contents", "passage", "abstract", "body")
ID_FIELDS = ("id", "doc_id", "docid", "pmid", "_id")
TITLE_FIELDS = ("title", "heading")
_EVAL_SPLIT_HINT = re.compile(r"(^|[^a-z])(dev|test|val|valid|validation|eval)([^a-z]|$)", re.I)


@dataclass(frozen=True)
class Document:
    id: str
    text: str
    source: str


def _load_items(path: Path):
    """``medqa.data.load_items`` (the public data API), falling back to its module while the package is young."""
    try:
        from ..data import load_items
    except ImportError:  # pragma: no cover - data package without __init__ exports
        from ..data.io import load_items
    return load_items(str(path))


def _read_rows(path: Path) -> list[dict]:
    from ..data.io import read_rows

    rows = []
    for raw in read_rows(path):
        if raw.error is not None:
            raise raw.error
        rows.append(raw.data)
    return rows


# --------------------------------------------------------------------------- text files

_MD_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_MD_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")
_MD_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$", re.M)
_MD_EMPH = re.compile(r"(\*\*|__|\*|`)")
_HTML_TAG = re.compile(r"<[^>\n]+>")
_FENCE = re.compile(r"^\s*(```|~~~).*$", re.M)


def clean_markdown(text: str) -> str:
    """Markdown to plain text: images dropped, links to their text, headings end a sentence."""
    text = _FENCE.sub("", text)
    text = _MD_IMAGE.sub("", text)
    text = _MD_LINK.sub(r"\1", text)
    text = _MD_HEADING.sub(lambda m: m.group(1).rstrip(".:") + ".", text)
    text = _HTML_TAG.sub(" ", text)
    text = _MD_EMPH.sub("", text)
    return re.sub(r"^\s*[-*+]\s+", "", text, flags=re.M)


def _text_document(path: Path, doc_id: str) -> Document:
    from ..data.io import read_text

    text = read_text(path)
    if path.suffix.lower() in (".md", ".markdown"):
        text = clean_markdown(text)
    return Document(doc_id, text, str(path))


# --------------------------------------------------------------------------- record files


def _first(row: dict, keys: Sequence[str]) -> tuple[str | None, object]:
    for key in keys:
        if key in row and row[key] not in (None, ""):
            return key, row[key]
    return None, None


def _records(path: Path, rows: list[dict]) -> list[Document]:
    docs = []
    for i, row in enumerate(rows):
        key, value = _first(row, TEXT_FIELDS)
        if key is None:
            raise DataError(f"row {i + 1} has no text field (one of {', '.join(TEXT_FIELDS)})", str(path))
        if not isinstance(value, str):
            raise DataError(f"row {i + 1}: expected text, got {type(value).__name__}", str(path), key)
        _, title = _first(row, TITLE_FIELDS)
        text = f"{str(title).strip().rstrip('.')}.\n{value}" if title else value
        _, rid = _first(row, ID_FIELDS)
        doc_id = str(rid).strip() if rid is not None else f"{path.stem}:{hashlib.sha1(value.encode()).hexdigest()[:12]}"
        docs.append(Document(doc_id, text, str(path)))
    return docs


def _from_items(path: Path, kind: str) -> list[Document]:
    loaded = _load_items(path)
    if kind == "auto":
        kind = "contexts" if loaded.dataset == "pubmedqa" else "explanations"
    field = "context" if kind == "contexts" else "explanation"
    if kind == "explanations" and _EVAL_SPLIT_HINT.search(path.stem):
        log.warning(
            "%s looks like an evaluation split: indexing its explanations leaks the answers of those questions "
            "into retrieval; build the corpus from a training split (check with `medqa index check-leakage`)",
            path,
        )
    docs = [
        Document(f"{loaded.dataset}:{it.id}", getattr(it, field), str(path))
        for it in loaded.items
        if getattr(it, field).strip()
    ]
    if not docs:
        raise DataError(f"no item has a non-empty {field}; nothing to index as {kind}", str(path))
    log.info("%s: %d %s from %d %s items", path, len(docs), kind, len(loaded.items), loaded.dataset)
    return docs


def _record_file(path: Path, kind: str) -> list[Document]:
    if kind in ("contexts", "explanations"):
        return _from_items(path, kind)
    rows = _read_rows(path)
    if not rows:
        raise DataError("file has no rows", str(path))
    if kind == "records" or any(k in rows[0] for k in TEXT_FIELDS):
        return _records(path, rows)
    if kind == "text":
        raise MedQAError(f"{path}: --kind text is for .md/.txt files; use records, contexts or explanations")
    return _from_items(path, "auto")


# --------------------------------------------------------------------------- entry points


def iter_documents(source: str | Path, kind: str = "auto") -> list[Document]:
    """Documents of one source (file or folder); see the module docstring."""
    if kind not in KINDS:
        raise MedQAError(f"unknown corpus kind {kind!r}; choose one of {', '.join(KINDS)} (--kind)")
    path = Path(source).expanduser()
    if not path.exists():
        raise DataError("corpus source not found", str(source))
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() in TEXT_SUFFIXES)
        if not files:
            raise DataError(f"folder has no {'/'.join(TEXT_SUFFIXES)} files", str(source))
        return [_text_document(p, f"{path.name}/{p.relative_to(path).as_posix()}") for p in files]
    suffix = path.suffix.lower()
    if suffix in TEXT_SUFFIXES:
        return [_text_document(path, path.name)]
    if suffix in RECORD_SUFFIXES:
        return _record_file(path, kind)
    raise DataError(
        f"unsupported corpus file {suffix or '(no extension)'}; use {', '.join(TEXT_SUFFIXES + RECORD_SUFFIXES)} "
        "or a folder", str(source)
    )


def load_corpus(sources: Iterable[str | Path], kind: str = "auto") -> tuple[list[Document], int]:
    """Documents of all sources with unique ids: (documents, number of exact repeats dropped).

    The same id with the same text (e.g. a file given twice) is kept once; the same id with different
    text is an error, because chunk ids must identify one text.
    """
    seen: dict[str, Document] = {}
    repeats = 0
    for source in sources:
        for doc in iter_documents(source, kind):
            prev = seen.get(doc.id)
            if prev is None:
                seen[doc.id] = doc
            elif prev.text == doc.text:
                repeats += 1
            else:
                raise DataError(
                    f"document id {doc.id!r} is used by two different texts ({prev.source} and {doc.source}); "
                    "give the records unique ids",
                    doc.source,
                )
    if not seen:
        raise MedQAError("no documents found in the corpus sources")
    return list(seen.values()), repeats
