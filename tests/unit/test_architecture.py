"""Dependencies flow one way, producer -> tasks -> workers -> prism, with no import cycles."""

from __future__ import annotations

import grimp

LAYERS = ["producer", "tasks", "workers", "prism"]


def test_layers_import_only_downwards():
    graph = grimp.build_graph(*LAYERS)
    wrong = []
    for i, lower in enumerate(LAYERS):
        for higher in LAYERS[:i]:
            for chain in graph.find_illegal_dependencies_for_layers(layers=[higher, lower], containers=set()):
                wrong.append(f"{chain.importer} -> {chain.imported}")
    assert not wrong, wrong


def test_no_import_cycles():
    graph = grimp.build_graph(*LAYERS)
    modules = sorted(graph.modules)
    cycles = []
    for module in modules:
        for imported in graph.find_modules_directly_imported_by(module):
            if graph.chain_exists(imported=module, importer=imported):
                cycles.append(tuple(sorted((module, imported))))
    assert not sorted(set(cycles)), sorted(set(cycles))


def test_the_producer_plans_nothing_heavier_than_ids():
    """Streaming an input and enqueueing its planning tasks: no tokenizer, no chunking, no
    pre-filter, no model; the fleet's planning tasks do that work."""
    graph = grimp.build_graph(*LAYERS)
    heavy = {"prism.segmenting", "prism.strategies.chunks", "prism.hybrid", "prism.embeddings", "prism.prior"}
    for planner in ("producer.plan", "producer.questions"):
        assert not graph.find_modules_directly_imported_by(planner) & heavy, planner
