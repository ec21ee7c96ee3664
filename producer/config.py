"""A run's config, resolved in one place from its settings and flags."""

from __future__ import annotations

from collections.abc import Callable

from prism.models import RunConfig
from producer.servers import fit_servers
from workers.priors import with_examples, with_prior
from workers.settings import Settings


def resolved_config(settings: Settings, say: Callable[[str], None] = lambda _: None) -> RunConfig:
    """The one way a run's config is made from its settings and flags (run, enqueue, estimate,
    the benchmarks): its options resolved, the prior model and example store pinned by
    checksum, its segments fitted to self-hosted servers' contexts (each said through ``say``).
    A resume keeps the config its manifest recorded, so its job ids stay."""
    return fit_servers(with_examples(with_prior(settings.run_config(), settings), settings), settings, say)
