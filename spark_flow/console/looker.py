"""When ``spark-flow serve`` reads its home: one look at a time, shared by the requests that wait
for it, and paced so an open page or a scrape costs the server the same at any home size.

A console page asks every 2 s; a look of 10,000 queues takes seconds, so a new look starts only
once the newest is older than the refresh and than :data:`PACE` times a look's length (the
process's first look, which opens every table, is not counted); looks then take at most a fifth
of the server's time however many pages are open, and a page says when its figures were read.
A page with a stale look, and every scrape, asks for the home as it is now (a look that began
after it asked, or the one under way) while a look takes at most :data:`WAIT_FOR_LOOK`; a bigger
home's asker gets the newest look, saying how old it is, and starts the next in the background
(so each scrape shows the home as it was at the scrape before, or later, as a scrape waiting for
its look would at the same cost); and a scrape never waits past its timeout. Serve's first look
of a big home can take longer than Prometheus waits (a minute at 10,000 queues): a scrape, or a
console page's list, that it keeps waiting a second is answered with the controller's last look,
when a controller has written one (read from the status table, again once it is as old as a
look would be). A look fails as the home does: the newest failure, if newer than the newest
look, is raised to every asker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime

from spark_flow.exceptions import one_line
from spark_flow.ops.status_view import status_view
from spark_flow.ops.view import HomeView, look

log = logging.getLogger("spark_flow.console.serve")

#: A console's look is fresh for this long (its page's refresh interval)...
FRESH = 2.0
#: ...or for this many times the look's own length, whichever is longer.
PACE = 4.0
#: A scrape waits for a look of its own while the newest took at most this long.
WAIT_FOR_LOOK = 1.0


#: A look: when it began (``time.monotonic()``), the home as it read it, how long it took.
Look = tuple[float, HomeView, float]


class Looker:
    """The reader of one home's tables (a table handle is shared by the process and not made
    for two threads at once: :attr:`lock` is held while anything reads or writes through one,
    never while asking for a look, which may wait for the background's)."""

    def __init__(self, home: str, storage_options: Mapping[str, str]) -> None:
        self.home, self.storage_options = home, storage_options
        self.lock = threading.RLock()
        self._state = threading.Condition()  # guards the fields below; notified when a look ends
        self._last: Look | None = None
        self._typical: float | None = None  # how long a look takes, once the process's first (which opens every table) is done
        self._failed: tuple[float, Exception] | None = None  # when the failed look began, its error
        self._reading: float | None = None  # when the look under way began
        self._background: threading.Thread | None = None
        self._status_lock = threading.Lock()  # one read of the status table at a time, shared by its askers
        self._status: tuple[float, HomeView | None, float] | None = None  # as a look: began, the view (None: no controller's), took

    def for_scrape(self, budget: float) -> tuple[HomeView, float, float] | None:
        """The look a scrape serves, how long it took and how long ago it began (see the module's
        docstring). While serve's first look is under way past :data:`WAIT_FOR_LOOK`: the
        controller's last look (:func:`~spark_flow.ops.status_view.status_view`), its age that of
        its write; without one, None if no look ends within ``budget`` seconds."""
        asked = time.monotonic()
        looked = self._current(min(budget, WAIT_FOR_LOOK) if self._first_under_way() else budget)
        if looked is None:
            status = self._status_look()
            if status is not None:
                _, view, _ = status
                return view, time.monotonic() - asked, (datetime.now(UTC) - view.at).total_seconds()
            looked = self._current(max(0.0, budget - (time.monotonic() - asked)))
            if looked is None:
                return None
        began, view, took = looked
        return view, took, time.monotonic() - began

    def _first_under_way(self) -> bool:
        """Whether no look has ended yet (the process's first, which opens every table)."""
        with self._state:
            return self._last is None and self._failed is None

    def recent(self, *, status: bool = False) -> Look:
        """The look a console page shows: the newest while it is fresh, else as a scrape's
        (:meth:`for_scrape`, however long the first look takes). ``status``: while serve's first
        look is under way past :data:`WAIT_FOR_LOOK`, the controller's last look will do (the
        page's list; not its chains, which the status table does not keep), at once once an
        asker has waited for it (a page's HTML, then its data, then its refreshes)."""
        with self._state:
            last, typical = self._last, self._typical or 0.0
            fresh = last is not None and time.monotonic() - last[0] <= max(FRESH, (PACE + 1) * typical)
        if fresh:
            return self._newest()
        if status and self._first_under_way():
            with self._status_lock:
                waited = self._status is not None
            looked = self._current(0.0 if waited else WAIT_FOR_LOOK) or self._status_look()
            if looked is not None:
                return looked
        looked = self._current(None)
        assert looked is not None, "a look ended"
        return looked

    def _status_look(self) -> Look | None:
        """The controller's last look (:func:`~spark_flow.ops.status_view.status_view`) as a
        look, None while no controller has written one; kept, and read again once older than a
        console look would be (:data:`FRESH`, :data:`PACE` times its read), so a page refreshed
        every 2 s and scrapes during a long first look read 10,000 rows that often, not each."""
        with self._status_lock:
            kept = self._status
            if kept is None or time.monotonic() - kept[0] > max(FRESH, PACE * kept[2]):
                began = time.monotonic()
                view = status_view(self.home, self.storage_options)
                kept = self._status = (began, view, time.monotonic() - began)
        began, view, took = kept
        return None if view is None else (began, view, took)

    def _current(self, budget: float | None) -> Look | None:
        """While a look takes at most :data:`WAIT_FOR_LOOK` (or none has been timed yet): a look
        that began when this was asked, or the one then under way, or None if none ends within
        ``budget`` seconds (None: however long); else the newest, the next started in the
        background."""
        with self._state:
            quick = self._typical is None or self._typical <= WAIT_FOR_LOOK
            since = min(time.monotonic(), self._reading if self._reading is not None else float("inf"))
        self.start()
        if quick:
            with self._state:
                self._state.wait_for(lambda: (self._last is not None and self._last[0] >= since)
                                     or (self._failed is not None and self._failed[0] >= since), budget)
                if self._last is None and self._failed is None:
                    return None
        return self._newest()

    def _newest(self) -> Look:
        """The newest look; its failure if a newer look failed."""
        with self._state:
            last, failed = self._last, self._failed
        if failed is not None and (last is None or failed[0] > last[0]):
            raise failed[1]
        assert last is not None, "a look ended"
        return last

    def start(self) -> None:
        """Read the home in the background (at start: the first page and scrape find its tables
        open), unless a look is under way."""
        with self._state:
            if self._reading is not None or (self._background is not None and self._background.is_alive()):
                return
            self._background = threading.Thread(target=self._quietly, name="spark-flow look", daemon=True)
            self._background.start()

    def _quietly(self) -> None:
        try:
            self._look()
        except Exception as error:  # said to the next asker, and in the log
            log.warning("cannot read %s: %s", self.home, one_line(error))

    def _look(self) -> None:
        """Read the home now."""
        with self.lock:
            with self._state:
                began = self._reading = time.monotonic()
            try:
                view = look(self.home, self.storage_options)
            except Exception as error:
                with self._state:
                    self._failed, self._reading = (began, error), None
                    self._state.notify_all()
                raise
            with self._state:
                if self._last is not None:
                    self._typical = time.monotonic() - began
                self._last, self._reading = (began, view, time.monotonic() - began), None
                self._state.notify_all()
