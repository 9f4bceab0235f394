"""The local index: a folder with chunk texts, a FAISS flat inner-product index, a BM25 index and a manifest.

Layout (everything is rewritten into a temporary sibling and swapped in with one rename, so a crash or a
full disk never leaves a half-written index)::

    INDEX/
      manifest.json   format/version, embedding model (spec, name, dim, probe vector), chunking settings,
                      BM25 settings, counts, sources, created/updated
      chunks.jsonl    one chunk per line: id, doc_id, n, text, source, sha (row i = FAISS vector i)
      dense.faiss     faiss.IndexFlatIP over unit vectors (exact cosine search)
      bm25/           bm25s index (Lucene BM25, k1=1.5, b=0.75) over the same chunks

Why FAISS flat: a mature library with a pip wheel and no server; exact search needs no training or tuning
and answers a query over 100k MiniLM vectors in milliseconds.  Beyond a few million chunks use a server
store (see :mod:`medqa.rag.remote`).
"""
from __future__ import annotations

import datetime as _dt
import json
import logging
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from ..records import MedQAError
from ..utils.io import atomic_dir, file_lock
from .base import MODES, Passage, check_k, check_mode
from .chunking import Chunk, check_settings, chunk_document, settings_dict
from .corpus import Document, load_corpus
from .embed import EMBEDDED, Embedder, load_embedder
from .hybrid import RRF_K, rrf

log = logging.getLogger(__name__)

INDEX_FORMAT = "medqa-rag-index"
INDEX_VERSION = 1
MANIFEST, CHUNKS, DENSE, BM25_DIR = "manifest.json", "chunks.jsonl", "dense.faiss", "bm25"
BM25_K1, BM25_B = 1.5, 0.75
MIN_CANDIDATES = 50  # per retriever, before fusion

# --------------------------------------------------------------------------- BM25 tokenizer

try:  # the Lucene English stop list bm25s uses; kept here so tokenization never changes under us
    from bm25s.stopwords import STOPWORDS_EN as _STOP
except ImportError:  # pragma: no cover
    _STOP = ()
STOPWORDS = frozenset(_STOP) or frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these "
    "they this to was will with".split()
)
TOKENIZER = "nfkc-lower-\\w\\w+-lucene-stopwords"
_WORD = re.compile(r"\w\w+")


def bm25_tokens(text: str) -> list[str]:
    """Lowercased words of 2+ word characters, English stop words removed (no stemming)."""
    return [t for t in _WORD.findall(unicodedata.normalize("NFKC", text).lower()) if t not in STOPWORDS]


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _require(module: str, extra: str = "rag"):
    import importlib

    if module == "faiss":  # its loader logs every CPU-feature probe at INFO
        logging.getLogger("faiss.loader").setLevel(logging.WARNING)
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MedQAError(f"the local RAG index needs {module}: pip install 'medqa[{extra}]'") from e


def _topn(scores: np.ndarray, n: int, positive_only: bool = False) -> np.ndarray:
    """Indices of the ``n`` best scores, best first, ties by index (deterministic)."""
    idx = np.flatnonzero(scores > 0) if positive_only else np.arange(len(scores))
    if len(idx) > n:
        part = np.argpartition(-scores[idx], n - 1)[:n]
        cut = scores[idx[part]].min()
        idx = idx[scores[idx] >= cut]  # keep every tie at the cut, then order exactly
    order = np.lexsort((idx, -scores[idx]))
    return idx[order][:n]


@dataclass
class AddStats:
    documents: int = 0  # documents offered
    added: int = 0  # new documents
    replaced: int = 0  # documents whose text changed (old chunks removed)
    unchanged: int = 0  # documents already indexed with the same chunks
    chunks_added: int = 0
    chunks_removed: int = 0
    repeats: int = 0  # exact repeats inside the sources
    seconds: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return dict(self.__dict__)


class LocalIndex:
    """Hybrid (FAISS dense + BM25, fused with RRF) retriever over a local index folder."""

    def __init__(self, manifest: dict, chunks: list[Chunk], dense, path: Path | None = None,
                 embedder: Embedder | None = None, mode: str = "hybrid", device: str | None = None):
        self.manifest = manifest
        self.chunks = chunks
        self.dense = dense
        self.path = path
        self.mode = check_mode(mode)
        self.device = device
        self._embedder = embedder
        self._by_id = {c.id: i for i, c in enumerate(chunks)}
        self._bm25 = None
        self.rrf_k = RRF_K

    # ------------------------------------------------------------------ construction

    @classmethod
    def new(cls, embedder: Embedder, chunk_words: int = 120, overlap: int = 30, mode: str = "hybrid") -> "LocalIndex":
        faiss = _require("faiss")
        bm25s = _require("bm25s")
        check_settings(chunk_words, overlap)
        from .. import __version__

        manifest = {
            "format": INDEX_FORMAT,
            "version": INDEX_VERSION,
            "medqa_version": __version__,
            "created": _now(),
            "updated": _now(),
            "embedding": embedder.describe(),
            "chunking": settings_dict(chunk_words, overlap),
            "dense": {"library": "faiss", "version": getattr(faiss, "__version__", "?"), "index": "IndexFlatIP"},
            "bm25": {"library": "bm25s", "version": getattr(bm25s, "__version__", "?"), "method": "lucene",
                     "k1": BM25_K1, "b": BM25_B, "tokenizer": TOKENIZER},
            "fusion": {"method": "rrf", "k": RRF_K},
            "counts": {"documents": 0, "chunks": 0},
            "sources": [],
        }
        return cls(manifest, [], faiss.IndexFlatIP(embedder.dim), embedder=embedder, mode=mode)

    @classmethod
    def load(cls, path: str | Path, *, embed_model: str | None = None, device: str | None = None,
             mode: str = "hybrid") -> "LocalIndex":
        """Open an index folder.  ``embed_model`` (if given) is checked against the manifest now; otherwise
        the manifest's model is loaded on the first dense query."""
        faiss = _require("faiss")
        path = Path(path).expanduser()
        mpath = path / MANIFEST
        if not mpath.is_file():
            hint = "" if path.exists() else " (not found)"
            raise MedQAError(f"{path}{hint} is not a RAG index folder (no {MANIFEST}); build one with `medqa index build`")
        try:
            manifest = json.loads(mpath.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise MedQAError(f"{mpath}: unreadable manifest ({e})") from None
        if manifest.get("format") != INDEX_FORMAT:
            raise MedQAError(f"{mpath}: not a medqa RAG index manifest (format {manifest.get('format')!r})")
        if manifest.get("version") != INDEX_VERSION:
            raise MedQAError(
                f"{path}: index format version {manifest.get('version')} is not supported by this medqa "
                f"(needs {INDEX_VERSION}); rebuild it with `medqa index build`"
            )
        from .chunking import CHUNKING_VERSION

        if manifest.get("chunking", {}).get("version") != CHUNKING_VERSION:
            raise MedQAError(f"{path}: built with chunking version {manifest['chunking'].get('version')}, this "
                             f"medqa chunks with version {CHUNKING_VERSION}; rebuild the index")
        with open(path / CHUNKS, encoding="utf-8") as f:
            chunks = [Chunk.from_dict(json.loads(line)) for line in f if line.strip()]
        dense = faiss.read_index(str(path / DENSE))
        if dense.ntotal != len(chunks) or manifest["counts"]["chunks"] != len(chunks):
            raise MedQAError(
                f"{path}: inconsistent index ({len(chunks)} chunks, {dense.ntotal} vectors, manifest says "
                f"{manifest['counts']['chunks']}); rebuild it"
            )
        index = cls(manifest, chunks, dense, path=path, mode=mode, device=device)
        if chunks:
            bm25s = _require("bm25s")
            index._bm25 = bm25s.BM25.load(str(path / BM25_DIR), show_progress=False, load_vocab=True)
        if embed_model is not None:
            index._embedder = index._checked_embedder(load_embedder(embed_model, device))
        return index

    def _checked_embedder(self, embedder: Embedder) -> Embedder:
        recorded = self.manifest["embedding"]
        embedder.check_compatible(recorded, f"index {self.path or '(in memory)'}")
        return embedder

    @property
    def embedder(self) -> Embedder:
        """The query embedder; loaded from the manifest's spec on first use and checked against its probe."""
        if self._embedder is None:
            spec = self.manifest["embedding"]["spec"]
            if spec.startswith(("/", ".", "~")) and not Path(spec).expanduser().exists():
                raise MedQAError(
                    f"index {self.path} was built with embedding model {spec}, which is not found here; "
                    "pass the same model with --embed-model"
                )
            self._embedder = self._checked_embedder(load_embedder(spec, self.device))
        return self._embedder

    # ------------------------------------------------------------------ contents

    def __len__(self) -> int:
        return len(self.chunks)

    @property
    def doc_ids(self) -> set[str]:
        return {c.doc_id for c in self.chunks}

    def get(self, chunk_id: str) -> Chunk | None:
        i = self._by_id.get(chunk_id)
        return None if i is None else self.chunks[i]

    def vectors(self) -> np.ndarray:
        """All chunk vectors (row i = chunk i)."""
        if not self.chunks:
            return np.zeros((0, self.dense.d), dtype=np.float32)
        return self.dense.reconstruct_n(0, self.dense.ntotal)

    def describe(self) -> dict:
        m = dict(self.manifest)
        m["embedding"] = {k: v for k, v in m["embedding"].items() if k != "probe"}
        return m

    # ------------------------------------------------------------------ adding

    def add_documents(self, docs: Iterable[Document], *, batch_size: int = 64, source_label: str | None = None,
                      kind: str | None = None) -> AddStats:
        """Chunk, embed and index ``docs``.  Already-indexed documents with identical chunks are skipped;
        documents whose text changed replace their old chunks (ids stay ``doc#n``)."""
        import time

        faiss = _require("faiss")
        t0 = time.perf_counter()
        chunking = self.manifest["chunking"]
        stats = AddStats()
        existing: dict[str, list[int]] = {}
        for i, c in enumerate(self.chunks):
            existing.setdefault(c.doc_id, []).append(i)
        new_chunks: list[Chunk] = []
        remove: list[int] = []
        batch_ids: set[str] = set()
        for doc in docs:
            if doc.id in batch_ids:
                raise MedQAError(f"document id {doc.id!r} appears twice in one add; document ids must be unique")
            batch_ids.add(doc.id)
            stats.documents += 1
            chunks = chunk_document(doc.id, doc.text, doc.source, chunk_words=chunking["chunk_words"],
                                    overlap=chunking["overlap"])
            old = existing.get(doc.id)
            if old is not None:
                if [self.chunks[i].sha for i in old] == [c.sha for c in chunks]:
                    stats.unchanged += 1
                    continue
                remove.extend(old)
                stats.replaced += 1
            else:
                stats.added += 1
            new_chunks.extend(chunks)
        stats.seconds["chunk"] = time.perf_counter() - t0
        if remove:
            drop = set(remove)
            self.dense.remove_ids(faiss.IDSelectorBatch(np.array(sorted(drop), dtype=np.int64)))
            self.chunks = [c for i, c in enumerate(self.chunks) if i not in drop]
            stats.chunks_removed = len(drop)
        if new_chunks:
            t1 = time.perf_counter()
            vecs = self.embedder.encode([c.text for c in new_chunks], batch_size=batch_size)
            stats.seconds["embed"] = time.perf_counter() - t1
            self.dense.add(np.ascontiguousarray(vecs, dtype=np.float32))
            self.chunks.extend(new_chunks)
            stats.chunks_added = len(new_chunks)
        if new_chunks or remove:
            t2 = time.perf_counter()
            self._rebuild_bm25()
            stats.seconds["bm25"] = time.perf_counter() - t2
        self._by_id = {c.id: i for i, c in enumerate(self.chunks)}
        self.manifest["counts"] = {"documents": len(self.doc_ids), "chunks": len(self.chunks)}
        self.manifest["updated"] = _now()
        if source_label is not None:
            self.manifest["sources"].append({
                "source": source_label, "kind": kind, "documents": stats.documents, "added": stats.added,
                "replaced": stats.replaced, "unchanged": stats.unchanged, "chunks_added": stats.chunks_added,
                "at": self.manifest["updated"],
            })
        stats.seconds["total"] = time.perf_counter() - t0
        return stats

    def _rebuild_bm25(self) -> None:
        """BM25 statistics (IDF, average length) depend on the whole corpus, so the sparse index is rebuilt
        from the stored texts on every add (seconds for 100k chunks; embedding is the slow part)."""
        bm25s = _require("bm25s")
        if not self.chunks:
            self._bm25 = None
            return
        bm25 = bm25s.BM25(k1=BM25_K1, b=BM25_B, method="lucene")
        bm25.index([bm25_tokens(c.text) for c in self.chunks], show_progress=False)
        self._bm25 = bm25

    def save(self, path: str | Path | None = None) -> Path:
        """Write the whole index atomically to ``path`` (default: where it was loaded from)."""
        faiss = _require("faiss")
        path = Path(path or self.path or "").expanduser()
        if not str(path) or str(path) == ".":
            raise MedQAError("no index folder given to save to")
        with atomic_dir(path) as tmp:
            with open(tmp / CHUNKS, "w", encoding="utf-8") as f:
                for c in self.chunks:
                    f.write(json.dumps(c.to_dict(), ensure_ascii=False) + "\n")
            faiss.write_index(self.dense, str(tmp / DENSE))
            if self._bm25 is not None:
                self._bm25.save(str(tmp / BM25_DIR), show_progress=False)
            (tmp / MANIFEST).write_text(json.dumps(self.manifest, indent=2, ensure_ascii=False) + "\n",
                                        encoding="utf-8")
        self.path = path
        return path

    # ------------------------------------------------------------------ search

    def _passage(self, i: int, score: float) -> Passage:
        c = self.chunks[i]
        return Passage(c.id, c.text, float(score), c.source)

    def _candidates(self, k: int) -> int:
        return min(len(self.chunks), max(MIN_CANDIDATES, 4 * k))

    def dense_rank(self, qvecs: np.ndarray, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per query: (chunk indices, cosines), best first."""
        n = min(n, len(self.chunks))
        if n == 0:
            return [(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)) for _ in range(len(qvecs))]
        scores, idx = self.dense.search(np.ascontiguousarray(qvecs, dtype=np.float32), n)
        out = []
        for s, i in zip(scores, idx):
            keep = i >= 0
            i, s = i[keep], s[keep]
            order = np.lexsort((i, -s))  # exact ties by chunk order, as BM25
            out.append((i[order], s[order]))
        return out

    def bm25_rank(self, query: str, n: int) -> tuple[np.ndarray, np.ndarray]:
        """(chunk indices, BM25 scores) of chunks sharing a term with ``query``, best first."""
        if self._bm25 is None or not self.chunks:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        tokens = bm25_tokens(query)
        if not tokens:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        scores = np.asarray(self._bm25.get_scores(tokens), dtype=np.float32)
        idx = _topn(scores, n, positive_only=True)
        return idx, scores[idx]

    def search(self, query: str, k: int = 5, mode: str | None = None) -> list[Passage]:
        """The ``k`` best passages for ``query`` (``mode``: hybrid (default), dense or bm25)."""
        return self.search_many([query], k, mode)[0]

    def search_many(self, queries: Sequence[str], k: int = 5, mode: str | None = None) -> list[list[Passage]]:
        check_k(k)
        mode = check_mode(mode or self.mode)
        if not self.chunks:
            return [[] for _ in queries]
        n = self._candidates(k)
        dense = self.dense_rank(self.embedder.encode(list(queries)), n) if mode in ("hybrid", "dense") else None
        results = []
        for qi, query in enumerate(queries):
            if mode == "dense":
                idx, s = dense[qi]
                results.append([self._passage(i, v) for i, v in zip(idx[:k], s[:k])])
                continue
            b_idx, b_s = self.bm25_rank(query, n)
            if mode == "bm25":
                results.append([self._passage(i, v) for i, v in zip(b_idx[:k], b_s[:k])])
                continue
            fused = rrf([dense[qi][0].tolist(), b_idx.tolist()], k=self.rrf_k)
            results.append([self._passage(i, v) for i, v in fused[:k]])
        return results


# --------------------------------------------------------------------------- build / add


def _lock_for(path: Path):
    return file_lock(path.parent / f".{path.name}.lock")


def build_index(sources: Sequence[str | Path], out: str | Path, *, kind: str = "auto", chunk_words: int = 120,
                overlap: int = 30, embed_model: str = EMBEDDED, device: str | None = None, batch_size: int = 64,
                overwrite: bool = False) -> tuple[LocalIndex, AddStats]:
    """Build a new index folder at ``out`` from corpus ``sources`` (see :mod:`medqa.rag.corpus`)."""
    import time

    out = Path(out).expanduser()
    if out.is_file():
        raise MedQAError(f"--out {out} is a file; give a folder for the index")
    if out.exists() and any(out.iterdir()) and not overwrite:
        what = "an index" if (out / MANIFEST).exists() else "a non-empty folder"
        raise MedQAError(f"{out} is already {what}; use `medqa index add` to extend it, or --force to rebuild")
    check_settings(chunk_words, overlap)
    t0 = time.perf_counter()
    docs, repeats = load_corpus(sources, kind)
    t_read = time.perf_counter() - t0
    embedder = load_embedder(embed_model or EMBEDDED, device)
    with _lock_for(out):
        index = LocalIndex.new(embedder, chunk_words, overlap)
        stats = index.add_documents(docs, batch_size=batch_size, source_label=" ".join(map(str, sources)), kind=kind)
        t1 = time.perf_counter()
        index.save(out)
        stats.seconds["save"] = time.perf_counter() - t1
    stats.repeats = repeats
    stats.seconds["read"] = t_read
    stats.seconds["total"] = time.perf_counter() - t0
    return index, stats


def add_to_index(path: str | Path, sources: Sequence[str | Path], *, kind: str = "auto",
                 embed_model: str | None = None, device: str | None = None,
                 batch_size: int = 64) -> tuple[LocalIndex, AddStats]:
    """Add (or update) documents in an existing index, with its own embedding model and chunk settings."""
    import time

    path = Path(path).expanduser()
    t0 = time.perf_counter()
    docs, repeats = load_corpus(sources, kind)
    with _lock_for(path):
        index = LocalIndex.load(path, embed_model=embed_model, device=device)
        stats = index.add_documents(docs, batch_size=batch_size, source_label=" ".join(map(str, sources)), kind=kind)
        index.save(path)  # also when nothing changed: the manifest records the attempt
    stats.repeats = repeats
    stats.seconds["total"] = time.perf_counter() - t0
    return index, stats


__all__ = ["LocalIndex", "AddStats", "build_index", "add_to_index", "bm25_tokens", "MODES"]
