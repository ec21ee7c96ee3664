"""Loading the document prior a run names: from a folder or s3:// prefix, checked against the
checksum the run recorded, once per process."""

from __future__ import annotations

from functools import cache
from importlib.resources import files

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
