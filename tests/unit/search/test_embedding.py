from __future__ import annotations

import numpy as np

from satellite.search import SearchDocument, embed_document
from satellite.search.embedding import DIM, document_words, embed_views, ensure_model, from_bytes, summary_words


def test_summary_view_keeps_only_the_first_sentence() -> None:
    # Given a description whose first sentence states the gist and the rest are usage notes
    description = "Take a screenshot of the page. Use this after navigating.\nReturns a PNG image."
    # When taking the summary view of the tool
    words = summary_words("puppeteer", "puppeteer_screenshot", description)
    # Then it holds the server, the split name and the first sentence's content words only
    assert words == ["puppeteer", "puppeteer", "screenshot", "take", "screenshot", "page"]


def test_summary_view_of_an_empty_description_is_the_name() -> None:
    # Given a tool with no description
    # When taking its summary view
    words = summary_words("redis-mcp", "getKey", "")
    # Then only the server and name words remain, without the generic "mcp"
    assert words == ["redis", "get", "key"]


def test_document_embedding_is_the_mean_of_its_two_unit_views() -> None:
    # Given a tool with a multi-sentence description and a parameter
    schema = {"type": "object", "properties": {"path": {"type": "string"}}}
    doc = SearchDocument("fs:read_file", "fs", "read_file", "Read a file. Large files are truncated.", schema)
    # When embedding it as discovery does
    stored = from_bytes(embed_document(doc))
    # Then it is the mean of the full and summary view embeddings, of norm at most 1
    full = ensure_model().embed_words(document_words("fs", "read_file", doc.description, ["path"]))
    summary = ensure_model().embed_words(summary_words("fs", "read_file", doc.description))
    assert stored is not None
    assert stored.shape == (DIM,)
    assert np.allclose(stored, (full + summary) / 2, atol=2e-3)
    assert 0.0 < float(np.linalg.norm(stored)) <= 1.0 + 1e-3


def test_no_views_embed_to_zeros() -> None:
    # Given no view at all
    # When embedding
    vector = embed_views([])
    # Then the result is the zero vector of the model's size
    assert vector.shape == (DIM,)
    assert not vector.any()
