"""A learned filing-type prior: question -> expected grade of each of the five filing types.

TF-IDF features of the question (words 1-2, and character 3-5 grams within words) and a ridge
regression per type, chosen and calibrated by cross-validation on training rows only. Its
confidence is the NDCG@5 its ranking is expected to reach, read off the margin of its
prediction (how far apart the predicted grades of the first four places are, weighted as NDCG
weights the places) by isotonic regression fitted out of fold: monotone in the margin by
construction. The plain top-two gap predicted the prior's misses less well on training rows. Saved as plain arrays (``.npz`` read with ``allow_pickle=False``) and JSON, with
a checksum over both: loading runs no code, and a changed file is refused.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from typing import TYPE_CHECKING, Any

import numpy as np

from prism.models import FILING_TYPES, Query, Ranking
from prism.ranking.metrics import ndcg_at

if TYPE_CHECKING:  # scikit-learn takes ~1 s to import: only the code that fits or loads a prior pays it
    from sklearn.feature_extraction.text import TfidfVectorizer

ARRAYS, META = "prior.npz", "prior.json"
FEATURES = {
    "words": {"ngram_range": (1, 2), "sublinear_tf": True, "min_df": 2},
    "chars": {"analyzer": "char_wb", "ngram_range": (3, 5), "sublinear_tf": True, "min_df": 3},
}
GRID = [(features, alpha) for features in (("words",), ("words", "chars")) for alpha in (1.0, 2.0, 3.0, 5.0)]


# An event is reported when it happens, in a current report (an 8-K, its press-release exhibit),
# which the prior, learned mostly from questions about periods, ranks low. Words that name one:
EVENT = re.compile(
    r"\b(8-?k|current report|item [1-9]\.\d\d|appoint\w*|resign\w*|retire[sd]?|retirement|hired|"
    r"new (?:ceo|cfo|coo|chief|president|chair\w*)|succe(?:ed|eds|eded|ssor)|vot(?:e|es|ed|ing)|nominees?|"
    r"ratif\w*|(?:annual|special) meeting|agm|elected|acquisitions?|acquired?|merger|merged?|divest\w*|"
    r"spin-?off|separation|tender offer|(?:credit|revolving|loan|merger|purchase) agreement|entered into|"
    r"announce[sd]?|announcement|press release|news release)\b",
    re.IGNORECASE,
)
# ... and words for what a company announces in its earnings release: results, non-GAAP measures, guidance.
RELEASE = re.compile(
    r"\b(press release|news release|earnings release|guidance|announce[sd]?|adjusted|non-gaap)\b", re.IGNORECASE
)


def event_forms(question: str, scores: dict[str, float]) -> dict[str, float]:
    """An event question ranks the 8-K level with the best type (a results announcement the
    earnings release too), so the filing choice weighs it by the period's fit like the others
    instead of never reaching it."""
    top, raised = max(scores.values(), default=0.0), dict(scores)
    if EVENT.search(question) and "8-K" in raised:
        raised["8-K"] = top
    if RELEASE.search(question) and "Earnings" in raised:
        raised["Earnings"] = top
    return raised


class PriorModelError(ValueError):
    pass


def _vectorizer(name: str) -> TfidfVectorizer:
    from sklearn.feature_extraction.text import TfidfVectorizer

    params: dict[str, Any] = dict(FEATURES[name])
    params["ngram_range"] = tuple(params["ngram_range"])
    return TfidfVectorizer(**params)


@dataclass
class DocPrior:
    vectorizers: dict[str, TfidfVectorizer]
    coef: np.ndarray  # (5, n_features)
    intercept: np.ndarray  # (5,)
    calibration: tuple[np.ndarray, np.ndarray]  # isotonic steps: margin -> expected NDCG@5 of the prior
    meta: dict

    name = "prior"

    # -- predicting ---------------------------------------------------------------------------

    def predict(self, questions: Sequence[str]) -> np.ndarray:
        from scipy.sparse import hstack

        features = hstack([self.vectorizers[n].transform(questions) for n in self.meta["features"]]).tocsr()
        return np.asarray(features @ self.coef.T) + self.intercept

    def form_scores(self, question: str) -> dict[str, float]:
        """Each filing type's predicted grade for a question, current reports raised for an event
        question (``event_forms``): what planning chooses filings by."""
        scores = {f: float(v) for f, v in zip(FILING_TYPES, self.predict([question])[0], strict=True)}
        return event_forms(question, scores)

    def confidence(self, predicted: np.ndarray) -> np.ndarray:
        """Expected NDCG@5 of the prior's ranking, per row of predicted grades."""
        return np.interp(margin(predicted), *self.calibration)

    @property
    def threshold(self) -> float:
        """Below this confidence the cascade asks the LLM (set at fit time for a share of queries)."""
        return float(self.meta["cascade"]["threshold"])

    def rank_predicted(self, predicted: np.ndarray, candidates: Sequence[str], top_k: int) -> Ranking:
        try:
            columns = [FILING_TYPES.index(c) for c in candidates]
        except ValueError:
            raise PriorModelError(
                f"the prior ranks the five filing types {FILING_TYPES}, got {list(candidates)}"
            ) from None
        scores = predicted[columns]
        order = sorted(range(len(candidates)), key=lambda i: (-scores[i], i))[:top_k]
        confidence = float(self.confidence(predicted)[0])
        return Ranking(
            indices=order,
            scores=[round(float(scores[i]), 4) for i in order],
            answered_by="prior",
            notes=[f"prior confidence {confidence:.3f}"],
        )

    def rank(self, question: str, candidates: Sequence[str], top_k: int) -> Ranking:
        return self.rank_predicted(self.predict([question])[0], candidates, top_k)

    # -- fitting ------------------------------------------------------------------------------

    @classmethod
    def fit(
        cls, queries: Sequence[Query], folds: int = 5, llm_share: float = 0.25, seed: int = 0, log=print
    ) -> DocPrior:
        """Choose features and ridge strength by cross-validated NDCG@5, fit on all rows, and
        calibrate confidence on the out-of-fold predictions of the chosen setting."""
        from sklearn.isotonic import IsotonicRegression
        from sklearn.model_selection import KFold

        queries = [q for q in queries if q.task == "documents" and q.qrel]
        if len(queries) < 50:
            raise PriorModelError(f"{len(queries)} document rows with qrels: too few to fit a prior")
        texts = np.array([q.question for q in queries], dtype=object)
        grades = np.array(
            [[(q.qrel or {}).get(i, 0) for i in range(len(FILING_TYPES))] for q in queries], dtype=np.float64
        )
        splits = list(KFold(folds, shuffle=True, random_state=seed).split(texts))
        best = None
        for features, alpha in GRID:
            oof = np.zeros_like(grades)
            for train, test in splits:
                model = cls._fit_arrays(texts[train], grades[train], features, alpha)
                oof[test] = model.predict(list(texts[test]))
            score = float(np.mean([ndcg_at(_order(oof[i]), q.qrel or {}) for i, q in enumerate(queries)]))
            log(f"cv ndcg@5 {score:.4f}: features {'+'.join(features)}, alpha {alpha}")
            if best is None or score > best[0]:
                best = (score, features, alpha, oof)
        assert best is not None  # GRID is not empty
        score, features, alpha, oof = best
        margins = margin(oof)
        quality = np.array([ndcg_at(_order(oof[i]), q.qrel or {}) for i, q in enumerate(queries)])
        iso = IsotonicRegression(increasing=True, out_of_bounds="clip").fit(margins, quality)
        model = cls._fit_arrays(texts, grades, features, alpha)
        model.calibration = (iso.X_thresholds_.astype(float), iso.y_thresholds_.astype(float))
        confidence = np.interp(margins, *model.calibration)
        model.meta.update(
            {
                "constant_order": constant_order(queries),
                "cv_ndcg5": round(score, 5),
                "folds": folds,
                "seed": seed,
                "rows": len(queries),
                "training_sha256": _training_hash(queries),
                "fitted_at": datetime.now(UTC).isoformat(timespec="seconds"),
                "versions": {
                    "python": platform.python_version(),
                    "scikit-learn": version("scikit-learn"),
                    "numpy": np.__version__,
                },
                "cascade": {"llm_share": llm_share, "threshold": float(np.quantile(confidence, llm_share))},
            }
        )
        return model

    @classmethod
    def _fit_arrays(cls, texts, grades: np.ndarray, features: tuple[str, ...], alpha: float) -> DocPrior:
        from scipy.sparse import hstack
        from sklearn.linear_model import Ridge

        vectorizers = {name: _vectorizer(name) for name in features}
        matrix = hstack([vectorizers[n].fit_transform(list(texts)) for n in features]).tocsr()
        ridge = Ridge(alpha=alpha).fit(matrix, grades)
        meta = {"features": list(features), "alpha": alpha, "feature_params": {n: FEATURES[n] for n in features}}
        return cls(vectorizers, ridge.coef_, ridge.intercept_, (np.array([0.0]), np.array([0.0])), meta)

    # -- files --------------------------------------------------------------------------------

    def to_files(self) -> dict[str, bytes]:
        arrays = {
            "coef": self.coef,
            "intercept": self.intercept,
            "cal_x": self.calibration[0],
            "cal_y": self.calibration[1],
        }
        for name, vec in self.vectorizers.items():
            terms = sorted(vec.vocabulary_, key=vec.vocabulary_.get)
            arrays[f"{name}_terms"] = np.array(terms, dtype=str)
            arrays[f"{name}_idf"] = vec.idf_
        buffer = io.BytesIO()
        np.savez_compressed(buffer, **arrays)  # type: ignore[arg-type]  # numpy stubs take only arrays by keyword
        data = buffer.getvalue()
        meta = {k: v for k, v in self.meta.items() if k != "sha256"}
        meta["sha256"] = _checksum(data, meta)
        return {ARRAYS: data, META: json.dumps(meta, indent=1, sort_keys=True).encode()}

    @classmethod
    def from_files(cls, files: dict[str, bytes]) -> DocPrior:
        meta, data = _checked(files)
        with np.load(io.BytesIO(data), allow_pickle=False) as arrays:
            vectorizers = {}
            for name in meta["features"]:
                vec = _vectorizer(name)
                vec.vocabulary_ = {str(t): i for i, t in enumerate(arrays[f"{name}_terms"])}
                vec.idf_ = arrays[f"{name}_idf"]
                vectorizers[name] = vec
            return cls(vectorizers, arrays["coef"], arrays["intercept"], (arrays["cal_x"], arrays["cal_y"]), meta)


def checksum(files: dict[str, bytes]) -> str:
    """A prior model's checksum, once its files are checked against it; nothing is loaded (a
    run pins the model by it without paying for scikit-learn)."""
    return _checked(files)[0]["sha256"]


def _checked(files: dict[str, bytes]) -> tuple[dict, bytes]:
    try:
        meta = json.loads(files[META])
        data = files[ARRAYS]
    except (KeyError, json.JSONDecodeError) as err:
        raise PriorModelError(f"not a prior model: {err}") from None
    expected = meta.pop("sha256", None)
    if expected != _checksum(data, meta):
        raise PriorModelError(
            "the prior model's files do not match their checksum: they were changed after fitting; refit it"
        )
    meta["sha256"] = expected
    return meta, data


def margin(predicted: np.ndarray) -> np.ndarray:
    """Per row: the gaps between the predicted grades of places 1-2, 2-3 and 3-4, weighted by
    NDCG's discount of the upper place. Small when the order hangs on near-ties."""
    top = -np.sort(-np.atleast_2d(predicted), axis=1)
    gaps = top[:, :3] - top[:, 1:4]
    return gaps @ (1 / np.log2(np.arange(2, 5)))


def constant_order(queries: Sequence[Query]) -> list[int]:
    """The five types by mean grade over these rows: the baseline the prior must beat."""
    grades = np.array([[q.qrel.get(i, 0) for i in range(len(FILING_TYPES))] for q in queries if q.qrel], dtype=float)
    return _order(grades.mean(axis=0))


def _order(predicted: np.ndarray) -> list[int]:
    return sorted(range(len(predicted)), key=lambda i: (-predicted[i], i))


def _training_hash(queries: Sequence[Query]) -> str:
    rows = sorted(json.dumps([q.id, q.question, sorted((q.qrel or {}).items())], ensure_ascii=False) for q in queries)
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()


def _checksum(data: bytes, meta: dict) -> str:
    return hashlib.sha256(data + json.dumps(meta, sort_keys=True).encode()).hexdigest()
