"""The console's pipeline graph at any size of home: the chains that matter, each laid out in
layers (a queue one column right of the queues whose consumers write to it), packed side by side.

A chain is a set of queues joined by what their consumers write (``downstream``). The ones that
matter come first: the selected queue's, those with a root cause of a hold, those that hold
producers, then the other chains of two queues or more; a queue alone that holds nothing is
in the list only. At most :data:`MAX_NODES` queues are drawn (the rest are counted), so the
graph of a home of 10,000 queues is as big as a screen. Laid out once per look at the home.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any

from spark_flow.ops.view import QueueView

#: Queues drawn at most: the graph stays a screen's size whatever the home's.
MAX_NODES = 60
#: Columns a shelf of chains spans before the next shelf starts below it.
SHELF_COLUMNS = 6

Edge = tuple[str, str, str, bool]  # queue, subscription, downstream queue, it holds its producers


def _chains(names: Iterable[str], edges: Sequence[Edge]) -> list[list[str]]:
    """The queues joined by an edge, either way, as chains (each sorted by name)."""
    parent = {name: name for name in names}

    def root(name: str) -> str:
        while parent[name] != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    for upper, _, lower, _ in edges:
        if upper in parent and lower in parent:
            parent[root(upper)] = root(lower)
    found: dict[str, list[str]] = {}
    for name in parent:
        found.setdefault(root(name), []).append(name)
    return [sorted(chain) for chain in found.values()]


def _layers(chain: list[str], edges: Sequence[Edge]) -> dict[str, int]:
    """Each queue's layer: the longest path to it from a queue nothing writes to (a cycle's
    queues stop growing after one pass per queue)."""
    inside = set(chain)
    layer = dict.fromkeys(chain, 0)
    links = [(a, b) for a, _, b, _ in edges if a in inside and b in inside and a != b]
    for _ in range(len(chain)):
        moved = False
        for upper, lower in links:
            if layer[lower] < layer[upper] + 1 <= len(chain):
                layer[lower], moved = layer[upper] + 1, True
        if not moved:
            break
    return layer


def _place(chain: list[str], edges: Sequence[Edge]) -> tuple[dict[str, tuple[int, int]], int, int]:
    """Each queue's (column, row) within its chain, rows of a layer in the order of the rows of
    the queues writing to them (fewer crossings); the chain's width and height."""
    layer = _layers(chain, edges)
    above: dict[str, list[str]] = {}
    for upper, _, lower, _ in edges:
        if upper in layer and lower in layer:
            above.setdefault(lower, []).append(upper)
    at: dict[str, tuple[int, int]] = {}
    for column in range(max(layer.values()) + 1):
        members = [n for n in chain if layer[n] == column]
        ranked = sorted(members, key=lambda n: (sum(at[u][1] for u in above.get(n, []) if u in at)
                                               / max(1, sum(1 for u in above.get(n, []) if u in at)), n))
        at.update({name: (column, row) for row, name in enumerate(ranked)})
    return at, max(layer.values()) + 1, max(row for _, row in at.values()) + 1


def pipeline_graph(queues: Mapping[str, QueueView], edges: Sequence[Edge], causes: Mapping[str, list[str]],
                   selected: str | None = None, outside: Collection[str] = ()) -> dict[str, Any]:
    """The graph the console draws from ``queues`` (the home's and, named in ``outside``, the
    queues of other homes its consumers write to): ``nodes`` (name, column, row, held, root
    cause, depth, unreadable, outside), ``edges`` between drawn queues, its ``columns`` and ``rows``,
    and how many chains and queues that matter were left out (``hidden_chains``, ``hidden_queues``)."""

    def weight(chain: list[str]) -> tuple[bool, bool, bool, bool, str]:
        return (selected not in chain, not any(n in causes for n in chain), not any(queues[n].held for n in chain),
                len(chain) == 1, chain[0])

    def matters(chain: list[str]) -> bool:
        return len(chain) > 1 or selected in chain or any(n in causes or queues[n].held for n in chain)

    chains = sorted((c for c in _chains(queues, edges) if matters(c)), key=weight)
    nodes: list[dict[str, Any]] = []
    drawn: set[str] = set()
    shelf_top = shelf_height = column = 0
    hidden_chains = hidden_queues = 0
    for chain in chains:
        if drawn and len(drawn) + len(chain) > MAX_NODES:
            hidden_chains, hidden_queues = hidden_chains + 1, hidden_queues + len(chain)
            continue
        at, width, height = _place(chain, edges)
        if column and column + width > SHELF_COLUMNS:
            shelf_top, shelf_height, column = shelf_top + shelf_height, 0, 0
        for name, (x, y) in at.items():
            queue = queues[name]
            nodes.append({"name": name, "column": column + x, "row": shelf_top + y, "held": queue.held,
                          "root_cause": list(causes.get(name, [])), "depth": queue.depth.count,
                          "error": queue.error is not None, "outside": name in outside})
        drawn.update(chain)
        column += width
        shelf_height = max(shelf_height, height)
    lines = [{"from": a, "subscription": s, "to": b, "backpressure": held} for a, s, b, held in edges
             if a in drawn and b in drawn]
    return {"nodes": nodes, "edges": lines, "columns": max((n["column"] + 1 for n in nodes), default=0),
            "rows": shelf_top + shelf_height, "hidden_chains": hidden_chains, "hidden_queues": hidden_queues}
