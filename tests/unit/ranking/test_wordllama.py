"""The wordllama embedder (the [wordllama] extra, installed with dev): static token vectors read
from the files its wheel ships, nothing downloaded."""

import numpy as np

from prism.ranking.embeddings import local_embedder
from prism.ranking.retrieval import SIGNALS, FilingIndex, filing_index
from tests.unit.ranking.test_minilm import TEXTS
from tests.unit.ranking.test_retrieval import CAPEX, FILING


def test_wordllama_vectors_are_unit_length_and_put_related_text_nearer():
    vectors = local_embedder("wordllama").embed(TEXTS)
    assert vectors.shape == (4, 256) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    similarity = vectors @ vectors.T
    assert similarity[0, 1] > similarity[0, 3] and similarity[2, 3] > similarity[2, 1]
    assert np.allclose(local_embedder("wordllama").embed([""]), 0)  # no tokens, no direction


def test_the_financial_retriever_takes_wordllama_as_a_signal_of_its_name_and_caches_it():
    model = local_embedder("wordllama")
    signals = FilingIndex(FILING, embedder=model).signals(CAPEX)
    assert set(signals) == {*SIGNALS, "wordllama"} and signals["wordllama"].shape == (len(FILING),)
    assert filing_index(FILING, model) is filing_index(FILING, model)
    assert filing_index(FILING, model) is not filing_index(FILING)  # another embedder, another index
