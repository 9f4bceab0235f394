"""Split documents into overlapping, sentence-aligned word windows with stable ids.

A chunk id is ``<doc id>#<n>`` (``n`` = 0-based position in the document).  Chunking is a pure function of
the document text and the settings (``chunk_words``, ``overlap``), so the same document always gets the
same ids and texts, on every run and machine, whatever else is in the corpus.  Each chunk also carries
``sha`` (SHA-256 of its text, 16 hex digits) so a changed document is detected on incremental add.

Windows hold at most ``chunk_words`` words.  A window that would cut a sentence is shortened to the last
sentence end in its second half; the next window starts up to ``overlap`` words earlier than the previous
one ended, snapped forward to a sentence start when one lies in that range.  A sentence longer than the
window is cut by words.
"""
from __future__ import annotations

import bisect
import hashlib
import re
import unicodedata
from dataclasses import dataclass

from ..records import MedQAError

CHUNKING_METHOD = "sentence-window"
CHUNKING_VERSION = 1  # bump when the algorithm changes: the manifest records it, so old indexes are refused
DEFAULT_CHUNK_WORDS = 120
DEFAULT_OVERLAP = 30

# A sentence ends at . ! ? (optionally followed by closing quotes/brackets) before whitespace, or at a newline.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'\)\]]*\s+|\s*\n\s*")


@dataclass(frozen=True)
class Chunk:
    id: str
    doc_id: str
    n: int
    text: str
    source: str
    sha: str

    def to_dict(self) -> dict:
        return {"id": self.id, "doc_id": self.doc_id, "n": self.n, "text": self.text, "source": self.source,
                "sha": self.sha}

    @classmethod
    def from_dict(cls, d: dict) -> "Chunk":
        return cls(d["id"], d["doc_id"], int(d["n"]), d["text"], d.get("source", ""), d["sha"])


def check_settings(chunk_words: int, overlap: int) -> None:
    if isinstance(chunk_words, bool) or not isinstance(chunk_words, int) or chunk_words < 8:
        raise MedQAError(f"chunk size must be an integer of at least 8 words, not {chunk_words!r} (--chunk-words)")
    if isinstance(overlap, bool) or not isinstance(overlap, int) or not 0 <= overlap <= chunk_words // 2:
        raise MedQAError(
            f"overlap must be between 0 and half the chunk size ({chunk_words // 2}), not {overlap!r} (--overlap)"
        )


def text_sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def normalize_text(text: str) -> str:
    """NFKC and no control characters; newlines are kept (they mark sentence/paragraph ends)."""
    text = unicodedata.normalize("NFKC", text)
    return "".join(ch if ch in "\n\t" or unicodedata.category(ch)[0] != "C" else " " for ch in text)


def sentence_words(text: str) -> tuple[list[str], list[int]]:
    """All words of ``text`` and the word positions where a sentence starts (always including 0)."""
    words: list[str] = []
    starts = [0]
    for sentence in _SENTENCE_END.split(normalize_text(text)):
        ws = sentence.split()
        if ws:
            if words and starts[-1] != len(words):
                starts.append(len(words))
            words.extend(ws)
    return words, starts


def split_words(text: str, chunk_words: int = DEFAULT_CHUNK_WORDS, overlap: int = DEFAULT_OVERLAP) -> list[str]:
    """The chunk texts of one document (words joined by single spaces)."""
    check_settings(chunk_words, overlap)
    words, starts = sentence_words(text)
    n = len(words)
    if n == 0:
        return []
    if n <= chunk_words:
        return [" ".join(words)]
    out: list[str] = []
    start = 0
    while True:
        end = min(start + chunk_words, n)
        if end < n:
            # the last sentence start in (start + chunk_words/2, end] becomes the window end
            i = bisect.bisect_right(starts, end) - 1
            if i >= 0 and starts[i] > start + chunk_words // 2:
                end = starts[i]
        out.append(" ".join(words[start:end]))
        if end >= n:
            return out
        nxt = max(end - overlap, start + 1)
        j = bisect.bisect_left(starts, nxt)  # first sentence start at or after nxt
        if j < len(starts) and starts[j] < end:
            nxt = starts[j]
        start = nxt


def chunk_document(
    doc_id: str, text: str, source: str = "", *, chunk_words: int = DEFAULT_CHUNK_WORDS,
    overlap: int = DEFAULT_OVERLAP,
) -> list[Chunk]:
    """Chunks of one document with ids ``doc_id#0``, ``doc_id#1``, ..."""
    if not doc_id or "\n" in doc_id:
        raise MedQAError(f"document id {doc_id!r} must be a non-empty single line")
    return [
        Chunk(f"{doc_id}#{n}", doc_id, n, t, source, text_sha(t))
        for n, t in enumerate(split_words(text, chunk_words, overlap))
    ]


def settings_dict(chunk_words: int, overlap: int) -> dict:
    """What the manifest records about chunking (an index is only extended with identical settings)."""
    return {"method": CHUNKING_METHOD, "version": CHUNKING_VERSION, "chunk_words": chunk_words, "overlap": overlap}
