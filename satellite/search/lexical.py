"""BM25F over a tool's name, server slug, parameter names and description, with typo correction.

Every field is reduced to Porter stems; a term's frequency in a document is the weighted sum of its frequencies in
the fields, so a word in the tool's name counts more than the same word deep in its description. Impacts (the
per-term, per-document BM25 contribution) are precomputed at build time so that a query only adds a few numpy
arrays together.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from rapidfuzz import process
from rapidfuzz.distance import Levenshtein

from satellite.search.text import content_words, stem

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from numpy.typing import NDArray

K1 = 1.2
B = 0.75
FIELD_WEIGHTS = {"name": 3.0, "server": 2.0, "params": 1.0, "description": 1.0}
# A corrected word is less certain than one the user typed correctly.
CORRECTION_WEIGHT = 0.8
MIN_WORD_FOR_CORRECTION = 4
MIN_COMPOUND_PART = 3


@dataclass(frozen=True, slots=True)
class Fields:
    """The words of one document, field by field (unstemmed)."""

    name: list[str]
    server: list[str]
    params: list[str]
    description: list[str]


@dataclass(frozen=True, slots=True)
class QueryTerm:
    """One stem the query asks for, with how much it counts."""

    stem: str
    weight: float


def split_compound(word: str, vocabulary: Iterable[str] | frozenset[str]) -> list[str]:
    """Split a glued identifier word such as ``sequentialthinking`` into two known words, if it is one."""
    known = vocabulary if isinstance(vocabulary, frozenset) else frozenset(vocabulary)
    for cut in range(MIN_COMPOUND_PART, len(word) - MIN_COMPOUND_PART + 1):
        head, tail = word[:cut], word[cut:]
        if head in known and tail in known:
            return [head, tail]
    return [word]


class LexicalIndex:
    """Precomputed BM25F impacts over a fixed list of documents."""

    def __init__(self, fields: Sequence[Fields]) -> None:
        self._size = len(fields)
        surface: set[str] = set()
        for f in fields:
            surface.update(f.description, f.params, f.server)
        known = frozenset(w for w in surface if len(w) >= MIN_COMPOUND_PART)
        weighted_tfs: list[dict[str, float]] = []
        lengths: list[float] = []
        for f in fields:
            tf: dict[str, float] = defaultdict(float)
            name_words = [part for w in f.name for part in split_compound(w, known)]
            for field_name, words in (
                ("name", name_words),
                ("server", f.server),
                ("params", f.params),
                ("description", f.description),
            ):
                weight = FIELD_WEIGHTS[field_name]
                for w in words:
                    tf[stem(w)] += weight
                surface.update(words)
            weighted_tfs.append(tf)
            lengths.append(sum(tf.values()))
        avg_length = (sum(lengths) / len(lengths)) if lengths else 1.0
        postings: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for doc, tf in enumerate(weighted_tfs):
            norm = K1 * (1.0 - B + B * lengths[doc] / avg_length)
            for term, freq in tf.items():
                postings[term].append((doc, freq * (K1 + 1.0) / (freq + norm)))
        self._postings: dict[str, tuple[NDArray[np.int32], NDArray[np.float32]]] = {}
        self._idf: dict[str, float] = {}
        n = max(self._size, 1)
        for term, plist in postings.items():
            idf = math.log(1.0 + (n - len(plist) + 0.5) / (len(plist) + 0.5))
            self._idf[term] = idf
            self._postings[term] = (
                np.fromiter((d for d, _ in plist), dtype=np.int32, count=len(plist)),
                np.fromiter((idf * s for _, s in plist), dtype=np.float32, count=len(plist)),
            )
        self._surface = sorted(w for w in surface if w.isalpha() and len(w) >= MIN_WORD_FOR_CORRECTION - 1)
        self._correction_cache: dict[str, list[str]] = {}

    def __len__(self) -> int:
        return self._size

    def knows(self, word: str) -> bool:
        """Whether the stem of ``word`` occurs in any document."""
        return stem(word) in self._postings

    def correct(self, word: str) -> list[str]:
        """Catalog words within a small edit distance of a word the catalog does not contain."""
        cached = self._correction_cache.get(word)
        if cached is not None:
            return cached
        result: list[str] = []
        if len(word) >= MIN_WORD_FOR_CORRECTION and word.isalpha():
            max_edits = 1 if len(word) <= 5 else 2
            matches = process.extract(word, self._surface, scorer=Levenshtein.distance, score_cutoff=max_edits, limit=8)
            if matches:
                best = min(m[1] for m in matches)
                result = [m[0] for m in matches if m[1] == best][:3]
        self._correction_cache[word] = result
        return result

    def query_terms(self, query: str) -> list[QueryTerm]:
        """Stems to look up for ``query``, typos replaced by the catalog words they most likely mean."""
        terms: dict[str, float] = {}
        for word in content_words(query):
            s = stem(word)
            if s in self._postings:
                terms[s] = max(terms.get(s, 0.0), 1.0)
                continue
            for candidate in self.correct(word):
                cs = stem(candidate)
                terms[cs] = max(terms.get(cs, 0.0), CORRECTION_WEIGHT)
        return [QueryTerm(s, w) for s, w in terms.items()]

    def corrected_words(self, query: str) -> list[str]:
        """Content words of ``query`` with each unknown word replaced by its closest catalog word, if any."""
        out: list[str] = []
        for word in content_words(query):
            candidates = [] if stem(word) in self._postings else self.correct(word)
            out.append(candidates[0] if candidates else word)
        return out

    def max_score(self, terms: Sequence[QueryTerm]) -> float:
        """An upper bound of :meth:`scores` for these terms, used to map scores into [0, 1]."""
        return sum(t.weight * self._idf.get(t.stem, 0.0) * (K1 + 1.0) for t in terms)

    def scores(self, terms: Sequence[QueryTerm]) -> NDArray[np.float32]:
        """BM25F score of every document for these terms."""
        out = np.zeros(self._size, dtype=np.float32)
        for t in terms:
            posting = self._postings.get(t.stem)
            if posting is not None:
                docs, impacts = posting
                out[docs] += impacts * np.float32(t.weight)
        return out
