"""An import-linter contract type (.importlinter names it): no import circle among the root packages'
modules, at any depth, however an import is hidden (inside a function, under TYPE_CHECKING).

import-linter's own `acyclic_siblings` compares a package's children with each other only: it misses a
package's __init__ and a module inside it importing each other (optim/__init__ dispatching onto
optim/prompt, which took its Proposal from optim/__init__)."""
from __future__ import annotations

from grimp import ImportGraph
from importlinter import Contract, ContractCheck, output


class AcyclicModulesContract(Contract):
    type_name = "acyclic_modules"

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        circles = [circle_through(graph, group) for group in circular_groups(graph)]
        return ContractCheck(kept=not circles, metadata={"circles": circles})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for circle in check.metadata["circles"]:
            output.print_error(f"{circle[0][0]} imports itself back through {len(circle) - 1} other module(s):")
            output.new_line()
            for importer, imported, lines in circle:
                output.print_error(f"- {importer} -> {imported} (l.{', l.'.join(map(str, lines))})", bold=False)
            output.new_line()


def circular_groups(graph: ImportGraph) -> list[list[str]]:
    """The modules that reach each other through imports (strongly connected), a sorted list per group of
    two or more."""
    groups, seen = [], set()
    for module in sorted(graph.modules):
        if module not in seen:
            group = graph.find_upstream_modules(module) & graph.find_downstream_modules(module)
            if group:
                members = sorted({module, *group})
                seen.update(members)
                groups.append(members)
    return groups


def circle_through(graph: ImportGraph, group: list[str]) -> list[tuple[str, str, list[int]]]:
    """A circle from the group's first module back to itself (its first import into the group, then the
    shortest chain back): each import as (importer, imported, its line numbers), read now because the graph
    is gone when a broken contract is printed."""
    start = group[0]
    first = min(m for m in graph.find_modules_directly_imported_by(start) if m in group)
    chain = [start, *graph.find_shortest_chain(importer=first, imported=start)]
    return [(a, b, sorted(d["line_number"] for d in graph.get_import_details(importer=a, imported=b)))
            for a, b in zip(chain, chain[1:], strict=False)]
