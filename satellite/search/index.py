"""Tool search index (draft)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from satellite.search.lexical import Fields, LexicalIndex
from satellite.search.text import content_words, split_words

MAX_SCHEMA_DEPTH = 3


@dataclass(frozen=True, slots=True)
class SearchDocument:
    path: str
    server: str
    name: str
    description: str
    input_schema: Mapping[str, Any]
    embedding: bytes | None = None


@dataclass(frozen=True, slots=True)
class SearchHit:
    path: str
    score: float


def parameter_names(schema: Mapping[str, Any], depth: int = 0) -> list[str]:
    props = schema.get("properties")
    names: list[str] = []
    if isinstance(props, Mapping):
        for key, sub in props.items():
            names.append(str(key))
            if depth < MAX_SCHEMA_DEPTH and isinstance(sub, Mapping):
                names.extend(parameter_names(sub, depth + 1))
                items = sub.get("items")
                if isinstance(items, Mapping):
                    names.extend(parameter_names(items, depth + 1))
    return names


def document_fields(doc: SearchDocument) -> Fields:
    return Fields(
        name=split_words(doc.name),
        server=split_words(doc.server),
        params=[w for p in parameter_names(doc.input_schema) for w in split_words(p)],
        description=content_words(doc.description),
    )


class SearchIndex:
    def __init__(self, documents: Sequence[SearchDocument]) -> None:
        self._paths = [d.path for d in documents]
        self._lexical = LexicalIndex([document_fields(d) for d in documents])

    @classmethod
    def build(cls, documents: Sequence[SearchDocument]) -> SearchIndex:
        return cls(documents)

    def __len__(self) -> int:
        return len(self._paths)

    def search(self, query: str, limit: int) -> list[SearchHit]:
        terms = self._lexical.query_terms(query)
        if not terms or limit <= 0:
            return []
        scores = self._lexical.scores(terms)
        top = self._lexical.max_score(terms)
        k = min(limit, len(self._paths))
        idx = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
        idx = idx[np.argsort(-scores[idx], kind="stable")]
        return [SearchHit(self._paths[i], float(scores[i] / top)) for i in idx if scores[i] > 0]
