"""The console's list of queues at any size of home: the ones that need an operator first (a
root cause, then the rest that hold their producers, the unreadable, stalled and backpressured),
then by name; filtered by a search on the name and by what they need; a page at a time.

Ordered and counted once per look at the home (:class:`Listing`), so each refresh of a page
costs the page, not the home: a home of 10,000 queues sends a browser 50 rows, not 10,000.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from spark_flow.exceptions import ConfigurationError
from spark_flow.ops.view import QueueView

#: Rows on a page: what a screen shows, so a page is drawn at once whatever the home's size.
PAGE_SIZE = 50
#: The longest search a page sends (a queue's name is rarely a tenth of it).
MAX_SEARCH = 200


def _attention(queue: QueueView) -> bool:
    return queue.error is not None or queue.held or any(s.stalled or s.backpressured for s in queue.subscriptions)


#: What the list may be narrowed to: each filter's name and the queues it keeps.
FILTERS: dict[str, Callable[[QueueView], bool]] = {
    "all": lambda q: True,
    "attention": _attention,
    "held": lambda q: q.held,
    "stalled": lambda q: any(s.stalled for s in q.subscriptions),
    "unreadable": lambda q: q.error is not None,
    "flowing": lambda q: not _attention(q),
}


@dataclass(frozen=True)
class ListQuery:
    """Which rows a page asks for: queues whose name contains ``search`` (any case), kept by
    filter ``show``, page ``page`` (from 0)."""

    search: str = ""
    show: str = "all"
    page: int = 0


def list_query(params: Mapping[str, str]) -> ListQuery:
    """A page's query from its URL's parameters ``search``, ``show`` and ``page``, checked:
    a bad one is an error naming it, its value and what is allowed."""
    search = params.get("search", "")
    if len(search) > MAX_SEARCH or not search.isprintable():
        raise ConfigurationError("search", search[:40], f"printable text of at most {MAX_SEARCH} characters")
    show = params.get("show", "all")
    if show not in FILTERS:
        raise ConfigurationError("show", show, ", ".join(FILTERS))
    page = params.get("page", "0")
    if not page.isdigit() or len(page) > 9:
        raise ConfigurationError("page", page, "a page number from 0")
    return ListQuery(search.strip().lower(), show, int(page))


def rank(queue: QueueView, causes: Mapping[str, list[str]]) -> int:
    """Where a queue comes in the list: 0 a root cause of a hold, 1 holds its producers, 2
    cannot be read, 3 a consumer stalled, 4 a consumer backpressured, 5 the rest."""
    subs = queue.subscriptions
    checks = (queue.name in causes, queue.held, queue.error is not None, any(s.stalled for s in subs),
              any(s.backpressured for s in subs))
    return next((i for i, check in enumerate(checks) if check), len(checks))


class Listing:
    """A look's queues in the console's order, with how many each filter keeps."""

    def __init__(self, queues: Mapping[str, QueueView], causes: Mapping[str, list[str]]) -> None:
        self.ordered = sorted(queues.values(), key=lambda q: (rank(q, causes), q.name))
        self.counts = {name: sum(1 for q in self.ordered if keep(q)) for name, keep in FILTERS.items()}

    def page(self, query: ListQuery) -> tuple[list[QueueView], dict[str, Any]]:
        """The queues of the page asked for (the last page if it asks beyond it) and where it is:
        ``page``, ``pages``, ``matching`` (queues the search and filter keep), ``first`` (the
        position of its first row in them), ``size`` and each filter's ``counts``."""
        keep = FILTERS[query.show]
        matching = [q for q in self.ordered if keep(q) and query.search in q.name.lower()] \
            if query.search or query.show != "all" else self.ordered
        pages = max(1, -(-len(matching) // PAGE_SIZE))
        page = min(query.page, pages - 1)
        first = page * PAGE_SIZE
        return matching[first:first + PAGE_SIZE], {
            "page": page, "pages": pages, "matching": len(matching), "first": first, "size": PAGE_SIZE,
            "total": len(self.ordered), "counts": self.counts, "search": query.search, "show": query.show}
