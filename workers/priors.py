"""Loading the models a run names (the document prior, the in-context example store): from a
folder or s3:// prefix, checked against the checksum the run recorded, once per process."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files

from prism.models import RunConfig
from prism.names import NEEDS_PRIOR
from prism.ranking.icl import EXAMPLES, INDEX, ExampleStore, ExampleStoreError
from prism.ranking.icl import META as ICL_META
from prism.ranking.prior import ARRAYS, META, DocPrior, PriorModelError, checksum
from workers.settings import Settings, named
from workers.store import open_store

PACKAGED = str(files("prism").joinpath("data", "doc_prior"))


@dataclass(frozen=True)
class Kind:
    """A model a run pins by checksum: how to read it from its files, and what to call it."""

    load: Callable[[dict[str, bytes]], DocPrior | ExampleStore]
    files: tuple[str, ...]
    error: type[ValueError]
    what: str


PRIOR = Kind(DocPrior.from_files, (ARRAYS, META), PriorModelError, "prior model")
EXAMPLE_STORE = Kind(ExampleStore.from_files, (INDEX, EXAMPLES, ICL_META), ExampleStoreError, "example store")


def _read(kind: Kind, uri: str, settings: Settings):
    return kind.load(_files(kind, uri, settings))


def _files(kind: Kind, uri: str, settings: Settings) -> dict[str, bytes]:
    store = open_store(uri, settings)
    try:
        return {name: store.get(name) for name in kind.files}
    except KeyError as err:
        raise kind.error(f"no {kind.what} at {uri}: {err} is missing") from None


def pinned(kind: Kind, ref: str, settings: Settings):
    """The model a run names as "<uri>#<sha256>", checked against that checksum."""
    uri, _, sha = ref.rpartition("#")
    model = _read(kind, uri, settings)
    if model.meta["sha256"] != sha:
        raise kind.error(f"the {kind.what} at {uri} is not the one the run was planned with (sha256 {sha[:12]}...)")
    return model


def read_prior(uri: str, settings: Settings) -> DocPrior:
    return _read(PRIOR, uri, settings)


def read_examples(uri: str, settings: Settings) -> ExampleStore:
    return _read(EXAMPLE_STORE, uri, settings)


def with_prior(config: RunConfig, settings: Settings) -> RunConfig:
    """The config with the prior model pinned by checksum, when its document ranker needs one."""
    if config.doc_ranker not in NEEDS_PRIOR:
        return config.model_copy(update={"prior": None})
    uri = settings.doc_prior or PACKAGED
    return config.model_copy(update={"prior": f"{uri}#{checksum(_files(PRIOR, uri, settings))}"})


def with_examples(config: RunConfig, settings: Settings) -> RunConfig:
    """The config with the example store pinned by checksum, when in-context examples are on."""
    if not any(config.icl.values()):
        return config.model_copy(update={"icl_index": None})
    if not settings.icl_index:
        raise ExampleStoreError(
            f"in-context examples are on but {named('icl_index')} names no example store (prism icl build)"
        )
    examples = read_examples(settings.icl_index, settings)
    if examples.meta["embedder"] != config.models["embeddings"]:
        raise ExampleStoreError(
            f"the example store was built with {examples.meta['embedder']!r}; set {named('embedder')} to match"
        )
    return config.model_copy(update={"icl_index": f"{settings.icl_index}#{examples.meta['sha256']}"})
