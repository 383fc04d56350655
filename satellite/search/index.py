"""Hybrid tool search: BM25F over words plus cosine similarity of static sentence embeddings.

Score of a hit, in [0, 1]::

    score = LEXICAL_WEIGHT * lexical + (1 - LEXICAL_WEIGHT) * max(cosine, 0)

``lexical`` is the tool's BM25F score divided by the best score any tool could reach for the query's words (every
query word present in the name at saturation), so 1.0 means "all the query's words, prominently"; ``cosine`` is
the mean cosine similarity of the query's static embedding with the tool's two views (full text and summary,
see :mod:`satellite.search.embedding`). Scores are comparable between tools of
one query, and only roughly between queries.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from satellite.search.embedding import (
    DIM,
    document_words,
    embed_views,
    ensure_model,
    from_bytes,
    parameter_names,
    summary_words,
    to_bytes,
)
from satellite.search.lexical import Fields, LexicalIndex
from satellite.search.text import content_words, split_words

if TYPE_CHECKING:
    from collections.abc import Sequence

    from numpy.typing import NDArray

LEXICAL_WEIGHT = 0.4


@dataclass(frozen=True, slots=True)
class SearchDocument:
    """One tool as search sees it.

    ``embedding`` is what :func:`satellite.search.embed_document` returned for this tool at discovery time; when
    absent (or made by a model of another size) the index computes it.
    """

    path: str
    server: str
    name: str
    description: str
    input_schema: Mapping[str, Any]
    embedding: bytes | None = None

    @classmethod
    def from_definition(
        cls, server: str, definition: Mapping[str, Any], embedding: bytes | None = None
    ) -> SearchDocument:
        """The document of an MCP tool definition (``name``, ``description``, ``inputSchema``) of ``server``."""
        name = str(definition["name"])
        schema = definition.get("inputSchema")
        return cls(
            path=f"{server}:{name}",
            server=server,
            name=name,
            description=str(definition.get("description") or ""),
            input_schema=schema if isinstance(schema, Mapping) else {},
            embedding=embedding,
        )


@dataclass(frozen=True, slots=True)
class SearchHit:
    """A ranked tool: its ``server:tool`` path and its relevance in [0, 1] (see the module docstring)."""

    path: str
    score: float


def is_meaningful_query(query: str) -> bool:
    """Whether ``query`` has at least one word that is not a stop word (so search can rank anything by it)."""
    return bool(content_words(query))


def _fields(doc: SearchDocument) -> Fields:
    return Fields(
        name=split_words(doc.name),
        server=split_words(doc.server),
        params=[w for p in parameter_names(doc.input_schema) for w in split_words(p)],
        description=content_words(doc.description),
    )


def _compute_embedding(doc: SearchDocument) -> NDArray[np.float32]:
    return embed_views(
        (
            document_words(doc.server, doc.name, doc.description, parameter_names(doc.input_schema)),
            summary_words(doc.server, doc.name, doc.description),
        )
    )


def _embedding(doc: SearchDocument) -> NDArray[np.float32]:
    if doc.embedding is not None:
        stored = from_bytes(doc.embedding)
        if stored is not None:
            return stored
    return _compute_embedding(doc)


def embed_document(doc: SearchDocument) -> bytes:
    """The tool's embedding, to compute once at discovery time and pass back as ``SearchDocument.embedding``.

    Returns:
        ``EMBEDDING_BYTES`` bytes: little-endian float16 vector of norm at most 1 (see
            :mod:`satellite.search.embedding`).

    Raises:
        ModelNotBuiltError: If the static embedding table has not been built.
    """
    return to_bytes(_compute_embedding(doc))


class SearchIndex:
    """An immutable index over a fixed list of tools."""

    def __init__(self, paths: list[str], lexical: LexicalIndex, embeddings: NDArray[np.float32]) -> None:
        self._paths = paths
        self._lexical = lexical
        self._embeddings = embeddings

    @classmethod
    def build(cls, documents: Sequence[SearchDocument]) -> SearchIndex:
        """Index ``documents``; their order breaks ties between equal scores.

        Raises:
            ModelNotBuiltError: If the static embedding table has not been built.
        """
        ensure_model()
        embeddings = np.zeros((len(documents), DIM), dtype=np.float32)
        for row, doc in enumerate(documents):
            embeddings[row] = _embedding(doc)
        return cls([d.path for d in documents], LexicalIndex([_fields(d) for d in documents]), embeddings)

    def __len__(self) -> int:
        return len(self._paths)

    def search(self, query: str, limit: int) -> list[SearchHit]:
        """The ``limit`` best tools for ``query``, best first; [] if the query has no meaningful word."""
        if limit <= 0 or not self._paths or not is_meaningful_query(query):
            return []
        terms = self._lexical.query_terms(query)
        scores = np.zeros(len(self._paths), dtype=np.float32)
        if terms:
            scores += self._lexical.scores(terms) * np.float32(LEXICAL_WEIGHT / self._lexical.max_score(terms))
        # Misspelt words are embedded as the catalog words they were corrected to.
        query_vector = ensure_model().embed_words(self._lexical.corrected_words(query))
        cosine = self._embeddings @ query_vector
        scores += np.maximum(cosine, 0.0) * np.float32(1.0 - LEXICAL_WEIGHT)
        k = min(limit, len(scores))
        top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        top = top[np.argsort(-scores[top], kind="stable")]
        return [SearchHit(self._paths[i], min(float(scores[i]), 1.0)) for i in top if scores[i] > 0.0]
