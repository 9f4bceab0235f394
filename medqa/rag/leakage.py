"""Leakage guard: does the retrieval index contain the evaluated questions themselves?

If the corpus holds an evaluated question (copied verbatim, lightly edited, or paraphrased), retrieval can
hand the model the question with its answer, and a RAG accuracy gain measures memorisation of the test set,
not grounding.  Three detectors, strongest first:

* ``exact``: the normalised question text (NFKC, lowercase, punctuation removed) occurs word-aligned
  inside a normalised chunk;
* ``ngram``: at least ``ngram_threshold`` of the question's word ``n``-grams (default 5-grams, 0.5), and at
  least ``min_ngram_hits`` (4) of them, occur in one indexed document (its chunks together, so a question cut
  by a chunk border still counts); the minimum keeps stock phrases ("is used in the treatment of") of short
  questions from counting;
* ``embedding``: the question's embedding has cosine >= ``cosine_threshold`` (0.9) with a chunk's.

Questions shorter than ``min_words`` words ("Which of the following is true?") are too generic to judge
and are counted as skipped.  On the local index every chunk is scanned; on other retrievers (e.g. Qdrant)
each question's top candidates from ``search`` are checked, which is approximate.

Where the task defines each question's evidence (PubMedQA: the question is its paper's title, the index holds
the abstracts), a question resembling *its own* abstract is expected: pass ``allowed`` (e.g.
:func:`own_context_docs`) and such matches are reported under ``expected`` instead of as leaks.

The report is data: callers decide to warn (``report.summary()``) or refuse (``report.raise_if_leaked()``).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Collection, Mapping, Sequence

from ..records import MCQItem, MedQAError

FIELDS = ("question", "question+options", "explanation", "context")
KIND_ORDER = {"exact": 0, "ngram": 1, "embedding": 2}


@dataclass(frozen=True)
class LeakageMatch:
    item_id: str
    chunk_id: str
    kind: str  # exact | ngram | embedding
    field: str
    score: float  # 1.0 for exact, n-gram containment, or cosine
    item_text: str
    chunk_text: str


@dataclass
class LeakageReport:
    n_items: int
    n_checked: int
    n_short: int
    n_chunks: int
    fields: tuple[str, ...]
    thresholds: dict
    method: str
    matches: list[LeakageMatch] = field(default_factory=list)
    expected: list[LeakageMatch] = field(default_factory=list)  # matches to the item's own allowed evidence

    @property
    def leaked_ids(self) -> set[str]:
        return {m.item_id for m in self.matches}

    @property
    def exact_ids(self) -> set[str]:
        return {m.item_id for m in self.matches if m.kind == "exact"}

    @property
    def near_ids(self) -> set[str]:
        return self.leaked_ids - self.exact_ids

    @property
    def has_leakage(self) -> bool:
        return bool(self.matches)

    def counts(self) -> dict:
        by_kind = {k: len({m.item_id for m in self.matches if m.kind == k}) for k in KIND_ORDER}
        return {"items": self.n_items, "checked": self.n_checked, "skipped_short": self.n_short,
                "leaked": len(self.leaked_ids), **by_kind, "expected_own_evidence": len(self.expected)}

    def summary(self, examples: int = 3) -> str:
        c = self.counts()
        t = self.thresholds
        head = (
            f"leakage check ({self.method}; fields: {', '.join(self.fields)}): {c['checked']} of {c['items']} "
            f"evaluated items checked against {self.n_chunks} chunks ({c['skipped_short']} too short to judge): "
            f"{c['leaked']} leaked — {c['exact']} exact, {c['ngram']} by {t['ngram']}-gram containment >= "
            f"{t['ngram_threshold']}, {c['embedding']} by embedding cosine >= {t['cosine_threshold']}"
        )
        if self.expected:
            head += f"; {len(self.expected)} more match only their own task-defined evidence (allowed)"
        lines = [head]
        for m in sorted(self.matches, key=lambda m: (KIND_ORDER[m.kind], -m.score))[:examples]:
            lines.append(f"  {m.kind} ({m.score:.2f}) item {m.item_id} ~ chunk {m.chunk_id}: "
                         f"{_clip(m.item_text)!r} ~ {_clip(m.chunk_text)!r}")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"counts": self.counts(), "n_chunks": self.n_chunks, "fields": list(self.fields),
                "thresholds": self.thresholds, "method": self.method, "matches": [asdict(m) for m in self.matches],
                "expected": [asdict(m) for m in self.expected]}

    def raise_if_leaked(self, what: str = "the evaluated items") -> None:
        if self.has_leakage:
            raise MedQAError(
                f"the RAG index contains {len(self.leaked_ids)} of {what} (exact or near-duplicate text), so "
                f"RAG results would be inflated:\n{self.summary()}\nRebuild the index without them (corpus from a "
                "training split only), or pass --rag-leakage warn to proceed anyway"
            )


def _clip(text: str, n: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


def item_text(item: MCQItem, field_name: str) -> str:
    if field_name == "question":
        return item.question
    if field_name == "question+options":
        return item.question + " " + " ".join(item.options)
    if field_name in ("explanation", "context"):
        return getattr(item, field_name)
    raise MedQAError(f"unknown leakage field {field_name!r}; choose from {', '.join(FIELDS)}")


def _norm(text: str) -> str:
    from ..data.split import normalize_question

    return normalize_question(text)


def _grams(words: Sequence[str], n: int) -> set[str]:
    return {" ".join(words[i:i + n]) for i in range(len(words) - n + 1)}


def _better(a: LeakageMatch | None, b: LeakageMatch) -> LeakageMatch:
    if a is None:
        return b
    return b if (KIND_ORDER[b.kind], -b.score) < (KIND_ORDER[a.kind], -a.score) else a


def doc_of(chunk_id: str) -> str:
    """The document id of a chunk id ``<doc id>#<n>``."""
    return chunk_id.rsplit("#", 1)[0]


def own_context_docs(items: Sequence[MCQItem]) -> dict[str, set[str]]:
    """Per item, the index document built from its own task-defined context (``<source>:<id>``, as
    :mod:`medqa.rag.corpus` names PubMedQA abstracts): a question resembling its own abstract is expected."""
    return {it.id: {f"{it.source}:{it.id}"} for it in items if it.context.strip() and it.source}


class _Collector:
    """Keeps the strongest match per item; matches to an item's allowed documents go to ``expected``."""

    def __init__(self, items, allowed):
        self.items, self.allowed = items, allowed or {}
        self.best: dict[int, LeakageMatch] = {}
        self.expected: dict[int, LeakageMatch] = {}

    def is_allowed(self, i: int, chunk_id: str) -> bool:
        return doc_of(chunk_id) in self.allowed.get(self.items[i].id, ())

    def add(self, i: int, match: LeakageMatch) -> None:
        target = self.expected if self.is_allowed(i, match.chunk_id) else self.best
        target[i] = _better(target.get(i), match)


def check_leakage(
    retriever,
    items: Sequence[MCQItem],
    *,
    fields: Sequence[str] = ("question",),
    ngram: int = 5,
    ngram_threshold: float = 0.5,
    cosine_threshold: float | None = 0.9,
    min_words: int = 5,
    min_ngram_hits: int = 4,
    candidates: int = 20,
    batch_size: int = 64,
    allowed: Mapping[str, Collection[str]] | None = None,
) -> LeakageReport:
    """Check ``items`` against the index behind ``retriever`` (a :class:`~medqa.rag.store.LocalIndex` is scanned
    fully; anything else with ``search`` is checked on its top ``candidates``).  ``cosine_threshold=None`` skips
    the embedding detector (no model load).

    ``allowed`` maps an item id to document ids that are that item's own task-defined evidence (e.g.
    :func:`own_context_docs` for PubMedQA, whose question is its paper's title): matches there are reported
    as ``expected``, not as leaks."""
    from .store import LocalIndex

    if ngram < 1 or not 0 < ngram_threshold <= 1:
        raise MedQAError("leakage check needs ngram >= 1 and 0 < ngram_threshold <= 1")
    for f in fields:
        item_text(items[0] if items else MCQItem(id="x", question="x", options=["a", "b"]), f)
    queries: list[tuple[int, str, str, list[str]]] = []  # (item index, field, raw text, normalised words)
    short_items: set[int] = set()
    for i, it in enumerate(items):
        for f in fields:
            raw = item_text(it, f)
            words = _norm(raw).split()
            if not raw.strip():
                continue
            if len(words) < max(min_words, ngram):
                short_items.add(i)
                continue
            queries.append((i, f, raw, words))
    checked = {q[0] for q in queries}
    thresholds = {"ngram": ngram, "ngram_threshold": ngram_threshold, "min_ngram_hits": min_ngram_hits,
                  "cosine_threshold": cosine_threshold, "min_words": min_words}
    full = isinstance(retriever, LocalIndex)
    n_chunks = len(retriever) if full else -1
    method = "full scan of the local index" if full else f"top-{candidates} retrieval candidates per question"
    found = _Collector(items, allowed)
    if full:
        _scan_local(retriever, items, queries, ngram, ngram_threshold, min_ngram_hits, found)
        if cosine_threshold is not None and queries and len(retriever):
            qv = retriever.embedder.encode([q[2] for q in queries], batch_size=batch_size)
            for (i, f, raw, _), (idx, cos) in zip(queries, retriever.dense_rank(qv, 4)):
                for ci, c in zip(idx, cos):  # the best match outside the item's allowed documents (and the allowed one)
                    if c < cosine_threshold:
                        break
                    chunk = retriever.chunks[int(ci)]
                    found.add(i, LeakageMatch(items[i].id, chunk.id, "embedding", f, float(c), raw, chunk.text))
                    if not found.is_allowed(i, chunk.id):
                        break
    else:
        _scan_candidates(retriever, items, queries, ngram, ngram_threshold, min_ngram_hits, cosine_threshold,
                         candidates, found)
    short_only = {i for i in short_items if i not in checked}
    return LeakageReport(len(items), len(checked), len(short_only), n_chunks, tuple(fields), thresholds, method,
                         [found.best[i] for i in sorted(found.best)],
                         [found.expected[i] for i in sorted(found.expected)])


def _scan_local(index, items, queries, n: int, threshold: float, min_hits: int, found: _Collector) -> None:
    """Exact and n-gram detectors over every chunk, grouped by document."""
    if not queries or not len(index):
        return
    want: dict[str, list[int]] = {}  # gram -> query numbers
    qgrams = []
    for qn, (_, _, _, words) in enumerate(queries):
        g = _grams(words, n)
        qgrams.append(len(g))
        for gram in g:
            want.setdefault(gram, []).append(qn)
    by_doc: dict[str, list[int]] = {}
    for ci, c in enumerate(index.chunks):
        by_doc.setdefault(c.doc_id, []).append(ci)
    qnorm = [" " + " ".join(q[3]) + " " for q in queries]
    for chunk_ids in by_doc.values():
        hits: dict[int, set[str]] = {}  # query number -> grams of it found in this document
        best_chunk: dict[int, tuple[int, int]] = {}  # query -> (hits in one chunk, chunk index)
        norms = {}
        for ci in chunk_ids:
            words = _norm(index.chunks[ci].text).split()
            norms[ci] = " " + " ".join(words) + " "
            per_chunk: dict[int, int] = {}
            for gram in _grams(words, n):
                for qn in want.get(gram, ()):
                    hits.setdefault(qn, set()).add(gram)
                    per_chunk[qn] = per_chunk.get(qn, 0) + 1
            for qn, h in per_chunk.items():
                if h > best_chunk.get(qn, (0, -1))[0]:
                    best_chunk[qn] = (h, ci)
        for qn, grams in hits.items():
            containment = len(grams) / qgrams[qn]
            exact = next((c for c in chunk_ids if qnorm[qn] in norms[c]), None) if containment == 1 else None
            if exact is None and (containment < threshold or len(grams) < min_hits):
                continue
            i, f, raw, _ = queries[qn]
            ci = best_chunk[qn][1]
            if exact is not None:
                match = LeakageMatch(items[i].id, index.chunks[exact].id, "exact", f, 1.0, raw,
                                     index.chunks[exact].text)
            else:
                match = LeakageMatch(items[i].id, index.chunks[ci].id, "ngram", f, round(containment, 4), raw,
                                     index.chunks[ci].text)
            found.add(i, match)


def _scan_candidates(retriever, items, queries, n, threshold, min_hits, cosine_threshold, k, found) -> None:
    """Exact/n-gram on each question's top-k passages; cosine when the retriever offers dense scores."""
    dense_ok = cosine_threshold is not None and getattr(retriever, "dense_scores_are_cosine", False)
    for i, f, raw, words in queries:
        g = _grams(words, n)
        q = " " + " ".join(words) + " "
        for p in retriever.search(raw, k):
            pw = _norm(p.text).split()
            if q in " " + " ".join(pw) + " ":
                found.add(i, LeakageMatch(items[i].id, p.id, "exact", f, 1.0, raw, p.text))
                continue
            shared = len(g & _grams(pw, n))
            if shared / len(g) >= threshold and shared >= min_hits:
                containment = shared / len(g)
                found.add(i, LeakageMatch(items[i].id, p.id, "ngram", f, round(containment, 4), raw, p.text))
        if dense_ok:
            for p in retriever.search(raw, 4, mode="dense"):
                if p.score < cosine_threshold:
                    break
                found.add(i, LeakageMatch(items[i].id, p.id, "embedding", f, p.score, raw, p.text))
                if not found.is_allowed(i, p.id):
                    break
