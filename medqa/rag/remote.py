"""A server-grade store: Qdrant, through ``qdrant-client`` (PyPI), with the same hybrid retrieval as the local index.

One Qdrant collection holds, per chunk, a named dense vector ``dense`` (cosine) and a named sparse vector
``bm25``.  The sparse vector carries BM25's document-side weight per term,
``tf / (tf + k1 * (1 - b + b * len / avglen))``, under a 31-bit hash of the term; the collection applies
``Modifier.IDF`` so the server multiplies in Lucene's IDF at query time.  With the whole corpus in one
collection this is exactly the local index's BM25 (see the parity test).  Hybrid search asks both legs in
one ``query_batch_points`` round trip and fuses them client-side with the same RRF as the local index.

The local manifest (embedding model + probe, chunking, BM25 settings) is stored in the collection's
metadata, so a mismatched query model is refused here too.

Addresses (``load_retriever``):

* ``qdrant://HOST[:PORT]/COLLECTION`` (HTTP, default port 6333), ``qdrants://...`` (HTTPS); API key from
  ``$QDRANT_API_KEY``;
* ``qdrant+local:PATH?collection=NAME``: qdrant-client's embedded local mode (a folder, no server; brute
  force search, for tests and small corpora).

Fill a collection from a local index with :func:`push_index` (``medqa index push INDEX URL``).
"""
from __future__ import annotations

import hashlib
import logging
import os
import uuid
from collections import Counter
from typing import Sequence
from urllib.parse import parse_qs, urlsplit

import numpy as np

from ..records import MedQAError
from .base import Passage, check_k, check_mode
from .embed import Embedder, load_embedder
from .hybrid import RRF_K, rrf

log = logging.getLogger(__name__)

DENSE, SPARSE = "dense", "bm25"
SCHEMES = ("qdrant", "qdrants", "qdrant+local")
TERM_HASH = "blake2b-31bit"
_UUID_NS = uuid.UUID("6f1d3c1e-5b8a-4c1e-9d2e-6d6564716172")


def _qdrant():
    try:
        import qdrant_client
        from qdrant_client import models
    except ImportError as e:
        raise MedQAError("the Qdrant retriever needs qdrant-client: pip install qdrant-client") from e
    return qdrant_client, models


def term_index(token: str) -> int:
    return int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=4).digest(), "little") & 0x7FFFFFFF


def _sparse(weights: dict[int, float]):
    _, m = _qdrant()
    keys = sorted(weights)
    return m.SparseVector(indices=keys, values=[float(weights[k]) for k in keys])


def query_sparse(text: str):
    """Query side: each (hashed) term with its count in the query, as bm25s scores repeated terms."""
    from .store import bm25_tokens

    weights: dict[int, float] = {}
    for tok, cnt in Counter(bm25_tokens(text)).items():
        h = term_index(tok)
        weights[h] = weights.get(h, 0.0) + cnt
    return _sparse(weights) if weights else None


def doc_sparse(tokens: Sequence[str], avgdl: float, k1: float, b: float):
    """Document side: BM25 saturated term frequency (IDF is applied by the server)."""
    dl = len(tokens)
    norm = k1 * (1 - b + b * dl / avgdl)
    weights: dict[int, float] = {}
    for tok, tf in Counter(tokens).items():
        h = term_index(tok)
        weights[h] = weights.get(h, 0.0) + tf / (tf + norm)
    return _sparse(weights)


def point_id(chunk_id: str) -> str:
    return str(uuid.uuid5(_UUID_NS, chunk_id))


def parse_url(url: str) -> tuple[dict, str]:
    """(QdrantClient keyword arguments, collection name) for a ``qdrant://`` / ``qdrants://`` / ``qdrant+local:`` url."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    collection = (query.get("collection") or [""])[0]
    if parts.scheme == "qdrant+local":
        path = (parts.netloc + parts.path) if parts.netloc else parts.path
        if not path:
            raise MedQAError(f"{url}: give the local Qdrant folder, e.g. qdrant+local:./qdrant?collection=medqa")
        kwargs = {"path": path}
    elif parts.scheme in ("qdrant", "qdrants"):
        if not parts.hostname:
            raise MedQAError(f"{url}: no host; use qdrant://HOST:6333/COLLECTION")
        collection = collection or parts.path.strip("/")
        http = "https" if parts.scheme == "qdrants" else "http"
        kwargs = {"url": f"{http}://{parts.hostname}:{parts.port or 6333}"}
        if os.environ.get("QDRANT_API_KEY"):
            kwargs["api_key"] = os.environ["QDRANT_API_KEY"]
    else:
        raise MedQAError(f"{url}: unsupported scheme; use one of {', '.join(s + '://' for s in SCHEMES)}")
    if not collection:
        raise MedQAError(f"{url}: no collection name (qdrant://HOST:PORT/COLLECTION or ?collection=NAME)")
    return kwargs, collection


def connect(url: str):
    qdrant_client, _ = _qdrant()
    kwargs, collection = parse_url(url)
    try:
        return qdrant_client.QdrantClient(**kwargs), collection
    except Exception as e:  # noqa: BLE001 - connection/lock errors vary by transport
        raise MedQAError(f"cannot open Qdrant at {url}: {e}") from e


class QdrantRetriever:
    """``search(query, k) -> list[Passage]`` over a Qdrant collection filled by :func:`push_index`."""

    dense_scores_are_cosine = True

    def __init__(self, client, collection: str, *, embedder: Embedder | None = None, embed_model: str | None = None,
                 device: str | None = None, mode: str = "hybrid", candidates: int = 50):
        _, self._m = _qdrant()
        self.client, self.collection = client, collection
        self.mode = check_mode(mode)
        self.candidates = candidates
        self.rrf_k = RRF_K
        try:
            info = client.get_collection(collection)
        except Exception as e:  # noqa: BLE001
            raise MedQAError(f"Qdrant collection {collection!r} not available: {e}") from e
        self.manifest = ((getattr(info.config, "metadata", None) or {}).get("medqa_manifest")) or {}
        recorded = self.manifest.get("embedding")
        if embedder is None and embed_model is None and not recorded:
            raise MedQAError(f"collection {collection!r} has no medqa manifest; pass --embed-model for its vectors")
        self._embedder = embedder
        self._embed_spec = embed_model or (recorded or {}).get("spec")
        self._device = device
        if embedder is not None and recorded:
            embedder.check_compatible(recorded, f"Qdrant collection {collection!r}")

    @classmethod
    def from_url(cls, url: str, **kwargs) -> "QdrantRetriever":
        client, collection = connect(url)
        return cls(client, collection, **kwargs)

    @property
    def embedder(self) -> Embedder:
        if self._embedder is None:
            emb = load_embedder(self._embed_spec, self._device)
            if self.manifest.get("embedding"):
                emb.check_compatible(self.manifest["embedding"], f"Qdrant collection {self.collection!r}")
            self._embedder = emb
        return self._embedder

    def __len__(self) -> int:
        return int(self.client.count(self.collection, exact=True).count)

    def search(self, query: str, k: int = 5, mode: str | None = None) -> list[Passage]:
        return self.search_many([query], k, mode)[0]

    def search_many(self, queries: Sequence[str], k: int = 5, mode: str | None = None) -> list[list[Passage]]:
        check_k(k)
        mode = check_mode(mode or self.mode)
        m = self._m
        n = max(self.candidates, 4 * k)  # as the local index: enough candidates to order ties and fuse
        vecs = self.embedder.encode(list(queries)) if mode in ("hybrid", "dense") else None
        requests, slots = [], []  # slots[q] = (dense request index or None, sparse request index or None)
        for qi, q in enumerate(queries):
            d = s = None
            if vecs is not None:
                d = len(requests)
                requests.append(m.QueryRequest(query=vecs[qi].tolist(), using=DENSE, limit=n, with_payload=True))
            sv = query_sparse(q) if mode in ("hybrid", "bm25") else None
            if sv is not None:
                s = len(requests)
                requests.append(m.QueryRequest(query=sv, using=SPARSE, limit=n, with_payload=True))
            slots.append((d, s))
        answers = self.client.query_batch_points(self.collection, requests=requests) if requests else []
        out = []
        for d, s in slots:
            dense_leg = _ordered(answers[d].points) if d is not None else []
            sparse_leg = _ordered(answers[s].points, positive_only=True) if s is not None else []
            if mode == "dense":
                points = [(p, p.score) for p in dense_leg[:k]]
            elif mode == "bm25":
                points = [(p, p.score) for p in sparse_leg[:k]]
            else:
                by_id = {p.payload["chunk_id"]: p for leg in (dense_leg, sparse_leg) for p in leg}
                ranked = [[p.payload["chunk_id"] for p in dense_leg], [p.payload["chunk_id"] for p in sparse_leg]]
                points = [(by_id[cid], score) for cid, score in rrf(ranked, k=self.rrf_k)[:k]]
            out.append([Passage(p.payload["chunk_id"], p.payload["text"], float(sc), p.payload.get("source", ""))
                        for p, sc in points])
        return out


def _ordered(points, positive_only: bool = False):
    """Best first; scores equal to 5 decimals (float32 vs float64 arithmetic) keep the index's chunk order, as the
    local index orders exact ties."""
    pts = [p for p in points if p.score > 0] if positive_only else list(points)
    return sorted(pts, key=lambda p: (-round(p.score, 5), p.payload.get("order", 0)))


def push_index(index, client, collection: str, *, batch_size: int = 256, recreate: bool = False) -> int:
    """Upload every chunk of a :class:`~medqa.rag.store.LocalIndex` (vectors, BM25 weights, texts) to Qdrant.

    Upserts are idempotent (point id = uuid5 of the chunk id).  ``recreate`` drops the collection first;
    otherwise an existing collection must have the same vector size.  Returns the number of points written.
    """
    from .store import bm25_tokens

    _, m = _qdrant()
    manifest = dict(index.manifest)
    manifest.pop("sources", None)
    tokens = [bm25_tokens(c.text) for c in index.chunks]
    avgdl = max(1e-9, float(np.mean([len(t) for t in tokens]))) if tokens else 1.0
    k1, b = manifest["bm25"]["k1"], manifest["bm25"]["b"]
    manifest["qdrant"] = {"avgdl": avgdl, "term_hash": TERM_HASH, "k1": k1, "b": b}
    dim = manifest["embedding"]["dim"]
    exists = client.collection_exists(collection)
    if exists and recreate:
        client.delete_collection(collection)
        exists = False
    if exists:
        have = client.get_collection(collection).config.params.vectors
        size = have[DENSE].size if isinstance(have, dict) else getattr(have, "size", None)
        if size != dim:
            raise MedQAError(f"Qdrant collection {collection!r} has vectors of size {size}, the index {dim}; "
                             "push with --recreate")
        client.update_collection(collection, metadata={"medqa_manifest": manifest})
    else:
        client.create_collection(
            collection,
            vectors_config={DENSE: m.VectorParams(size=dim, distance=m.Distance.COSINE)},
            sparse_vectors_config={SPARSE: m.SparseVectorParams(modifier=m.Modifier.IDF)},
            metadata={"medqa_manifest": manifest},
        )
    vectors = index.vectors()
    written = 0
    for start in range(0, len(index.chunks), batch_size):
        points = []
        for i in range(start, min(start + batch_size, len(index.chunks))):
            c = index.chunks[i]
            points.append(m.PointStruct(
                id=point_id(c.id),
                vector={DENSE: vectors[i].tolist(), SPARSE: doc_sparse(tokens[i], avgdl, k1, b)},
                payload={"chunk_id": c.id, "doc_id": c.doc_id, "n": c.n, "text": c.text, "source": c.source,
                         "sha": c.sha, "order": i},
            ))
        client.upsert(collection, points=points, wait=True)
        written += len(points)
    return written
