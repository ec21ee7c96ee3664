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
