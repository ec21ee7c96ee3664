"""The minilm embedder (the [minilm] extra, installed with dev) and the financial retriever with
MiniLM as one more signal. The model file ships in a package: nothing is downloaded."""

import numpy as np

from prism.models import RunConfig
from prism.ranking.embeddings import MiniLmEmbedder, local_embedder
from prism.ranking.hybrid import dense_scorer, prefilter
from prism.ranking.rankers import build_ranker
from prism.ranking.retrieval import SIGNALS, WEIGHTS_MINILM, FilingIndex
from tests.unit.ranking.test_retrieval import CAPEX, CASH_FLOW_PAGE, FILING

TEXTS = [
    "What dividends were paid to shareholders?",
    "Cash dividends paid to stockholders",
    "How many people does the firm employ?",
    "Employees: about 93,000 people work worldwide.",
]


def test_minilm_vectors_are_unit_length_and_put_related_text_nearer(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    vectors = local_embedder("minilm").embed(TEXTS)
    assert vectors.shape == (4, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    similarity = vectors @ vectors.T
    # each question is nearer its own answer's words than the other's
    assert similarity[0, 1] > similarity[0, 3] + 0.1 and similarity[2, 3] > similarity[2, 1] + 0.1


def test_a_text_embeds_the_same_alone_and_in_a_padded_batch():
    model = MiniLmEmbedder(threads=1)
    batch = model.embed(TEXTS)
    alone = np.stack([model.embed([text])[0] for text in TEXTS])
    assert np.allclose(batch, alone, atol=1e-4)
    long = model.embed(["revenue " * 2000])  # cut at 256 word pieces, not an error
    assert long.shape == (1, 384)


def test_the_financial_retriever_takes_minilm_as_one_more_signal():
    index = FilingIndex(FILING, embedder=local_embedder("minilm"))
    signals = index.signals(CAPEX)
    assert set(signals) == {*SIGNALS, "minilm"} == set(WEIGHTS_MINILM)
    assert signals["minilm"].shape == (len(FILING),) and np.all(np.abs(signals["minilm"]) <= 1 + 1e-6)
    assert int(np.argmax(index.scores(CAPEX))) == CASH_FLOW_PAGE
    assert set(FilingIndex(FILING).signals(CAPEX)) == set(SIGNALS)  # no embedder, no minilm signal


def test_financial_minilm_is_a_zero_cost_scorer_for_the_pre_filter_and_the_ranker():
    config = RunConfig(chunk_ranker="financial", dense="financial-minilm")
    assert "embeddings" not in config.paid_stages()
    assert dense_scorer("financial-minilm") == "financial-minilm"
    kept = prefilter(CAPEX, FILING, 2, "financial-minilm")
    assert CASH_FLOW_PAGE in kept and kept == sorted(kept)
    ranker = build_ranker(config, "segments", None)
    assert ranker.embedder is not None and ranker.rank(CAPEX, FILING, 1).indices == [CASH_FLOW_PAGE]
