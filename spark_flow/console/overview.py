"""The console's answer to a page's refresh: the home's own figures, one page of its queues
(:mod:`spark_flow.console.listing`) and the chains that matter (:mod:`spark_flow.console.graph`).

Built once per look at the home and kept with it: the causes, the order and the graph are
worked out at the first refresh after a look, each page's answer once per look, and a page that
sends the digest of the answer it has (``seen``) gets ``{"same": true}`` while nothing it shows
changed. Between changes a refresh costs the server a dictionary lookup, at any home size.
During serve's first look the answer is the controller's last look (``read_from`` ``status``),
which keeps no chains: no root cause is marked and no chain drawn until serve has read the tables.
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import asdict
from typing import Any

from spark_flow.console.api import depth_json, queue_json, unix_time
from spark_flow.console.graph import pipeline_graph
from spark_flow.console.listing import Listing, ListQuery
from spark_flow.ops.view import HomeView
from spark_flow.ops.why import edges, root_causes

#: Answers kept per look (a page's query and selected queue each make one).
KEPT = 64


class Overview:
    """One look at the home as the console serves it."""

    def __init__(self, view: HomeView, *, read_only: bool) -> None:
        self.view, self.read_only = view, read_only
        chained = view.read_from == "tables"
        self.causes = root_causes(view) if chained else {}
        self.listing = Listing(view.queues, self.causes)
        self.edges = edges(view) if chained else []
        self._answers: dict[tuple[ListQuery, str | None], tuple[str, dict[str, Any]]] = {}
        self._lock = threading.Lock()

    def answer(self, query: ListQuery, selected: str | None, seen: str = "") -> dict[str, Any]:
        """The page's answer, or ``{"same": true}`` (with the look's time) when its digest is ``seen``."""
        key = (query, selected if self.view.queue(selected or "") is not None else None)
        with self._lock:
            if key not in self._answers:
                if len(self._answers) >= KEPT:
                    self._answers.clear()
                body = self._body(*key)
                digest = hashlib.blake2b(json.dumps(body, sort_keys=True).encode(), digest_size=12).hexdigest()
                self._answers[key] = (digest, body)
            digest, body = self._answers[key]
        read = {"at": unix_time(self.view.at), "read_from": self.view.read_from, "digest": digest}
        return {"same": True, **read} if digest == seen else {**body, **read}

    def _body(self, query: ListQuery, selected: str | None) -> dict[str, Any]:
        view = self.view
        rows, where = self.listing.page(query)
        return {
            "home": view.home, "read_only": self.read_only,
            "home_limits": asdict(view.limits) if view.limits.enabled else None,
            "home_depth": depth_json(view.depth), "home_flow_stopped": view.state.flow_stopped,
            "home_flow_stopped_count": view.state.flow_stopped_count,
            "queues": [queue_json(q, self.causes) for q in rows], "list": where,
            "graph": pipeline_graph({**view.queues, **view.others}, self.edges, self.causes, selected, view.others),
            "status_updated": unix_time(view.status_updated),
        }
