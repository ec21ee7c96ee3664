"""Loading the models a run names (the document prior, the in-context example store): from a
folder or s3:// prefix, checked against the checksum the run recorded, once per process."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

from prism.icl import EXAMPLES, INDEX, ExampleStore, ExampleStoreError
from prism.icl import META as ICL_META
from prism.models import RunConfig
from prism.prior import ARRAYS, META, DocPrior, PriorModelError
from workers.settings import Settings
from workers.store import open_store

PACKAGED = str(files("prism").joinpath("data", "doc_prior"))


def read_prior(uri: str, settings: Settings) -> DocPrior:
    store = open_store(uri, settings)
    try:
        return DocPrior.from_files({name: store.get(name) for name in (ARRAYS, META)})
    except KeyError as err:
        raise PriorModelError(f"no prior model at {uri}: {err} is missing") from None


@cache
def _cached(uri: str, sha: str) -> DocPrior:
    from workers import runtime

    model = read_prior(uri, runtime.get().settings)
    if model.meta["sha256"] != sha:
        raise PriorModelError(f"the prior model at {uri} is not the one the run was planned with (sha256 {sha[:12]}...)")
    return model


def prior_for(config: RunConfig) -> DocPrior | None:
    if not config.prior:
        return None
    uri, _, sha = config.prior.rpartition("#")
    return _cached(uri, sha)


def with_prior(config: RunConfig, settings: Settings) -> RunConfig:
    """The config with the prior model pinned by checksum, when its document ranker needs one."""
    if config.doc_ranker not in ("prior", "cascade", "fuse"):
        return config.model_copy(update={"prior": None})
    uri = settings.doc_prior or PACKAGED
    model = read_prior(uri, settings)
    return config.model_copy(update={"prior": f"{uri}#{model.meta['sha256']}"})


def read_examples(uri: str, settings: Settings) -> ExampleStore:
    store = open_store(uri, settings)
    try:
        return ExampleStore.from_files({name: store.get(name) for name in (INDEX, EXAMPLES, ICL_META)})
    except KeyError as err:
        raise ExampleStoreError(f"no example store at {uri}: {err} is missing") from None


@cache
def _cached_examples(uri: str, sha: str) -> ExampleStore:
    from workers import runtime

    examples = read_examples(uri, runtime.get().settings)
    if examples.meta["sha256"] != sha:
        raise ExampleStoreError(f"the example store at {uri} is not the one the run was planned with")
    return examples


def examples_for_run(config: RunConfig) -> ExampleStore | None:
    if not config.icl_index:
        return None
    uri, _, sha = config.icl_index.rpartition("#")
    return _cached_examples(uri, sha)


def with_examples(config: RunConfig, settings: Settings) -> RunConfig:
    """The config with the example store pinned by checksum, when in-context examples are on."""
    if not any(config.icl.values()):
        return config.model_copy(update={"icl_index": None})
    if not settings.icl_index:
        raise ExampleStoreError("in-context examples are on but PRISM_ICL_INDEX names no example store (prism icl build)")
    examples = read_examples(settings.icl_index, settings)
    if examples.meta["embedder"] != config.models["embeddings"]:
        raise ExampleStoreError(f"the example store was built with {examples.meta['embedder']!r}; set PRISM_EMBEDDER to match")
    return config.model_copy(update={"icl_index": f"{settings.icl_index}#{examples.meta['sha256']}"})
