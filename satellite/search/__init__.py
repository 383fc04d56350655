"""Natural-language search over upstream MCP tools.

Ranking is hybrid: BM25F over each tool's split name, server slug, parameter names and description (Snowball
stems, typos corrected against the catalog's own words) plus cosine similarity of static sentence embeddings
distilled from all-MiniLM-L6-v2. The embedding table is built once by ``python -m satellite.search.build_model``;
see :mod:`satellite.search.embedding` for the stored embedding format and :mod:`satellite.search.index` for what
a score means.
"""

from __future__ import annotations

from satellite.search.embedding import ModelNotBuiltError, ensure_model
from satellite.search.index import SearchDocument, SearchHit, SearchIndex, embed_document, is_meaningful_query

__all__ = [
    "ModelNotBuiltError",
    "SearchDocument",
    "SearchHit",
    "SearchIndex",
    "embed_document",
    "ensure_model",
    "is_meaningful_query",
]
