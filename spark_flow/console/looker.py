"""When ``spark-flow serve`` reads its home: one look at a time, shared by the requests that wait
for it, and paced so an open page or a scrape costs the server the same at any home size.

A console page asks every 2 s; a look of 10,000 queues takes seconds, so the page is answered
from the newest look while the next is read in the background, and a new look starts only once
the newest is older than the refresh and than :data:`PACE` times a look's length (the process's
first look, which opens every table, is not counted). Looks then take at most a fifth of the
server's time however many pages are open, and a page says when its figures were read. A scrape
asks for the home as it is now (a look that began after it asked, or the one under way) while
a look takes at most :data:`WAIT_FOR_LOOK`; a bigger home's scrape gets the newest look, saying
how old it is, and starts the next in the background (so each scrape shows the home as it was at
the scrape before, or later, as a scrape waiting for its look would at the same cost); and a
scrape never waits past its timeout: serve's first look of a big home can take longer than
Prometheus waits. A look fails as the home does: the newest
failure, if newer than the newest look, is raised to every asker.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

from spark_flow.exceptions import one_line
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
    for two threads at once: :attr:`lock` is held while anything reads or writes through one)."""

    def __init__(self, home: str, storage_options: Mapping[str, str]) -> None:
        self.home, self.storage_options = home, storage_options
        self.lock = threading.RLock()
        self._state = threading.Condition()  # guards the fields below; notified when a look ends
        self._last: Look | None = None
        self._typical: float | None = None  # how long a look takes, once the process's first (which opens every table) is done
        self._failed: tuple[float, Exception] | None = None  # when the failed look began, its error
        self._reading: float | None = None  # when the look under way began
        self._background: threading.Thread | None = None

    def for_scrape(self, budget: float) -> tuple[HomeView, float, float] | None:
        """The look a scrape serves, how long it took and how long ago it began (see the module's
        docstring); None if none has ended within ``budget`` seconds (serve's first look of a
        big home), the newest if a look of its own did not."""
        with self._state:
            typical = self._typical
            since = min(time.monotonic(), self._reading if self._reading is not None else float("inf"))
        if typical is not None and typical > WAIT_FOR_LOOK:  # the newest, and a look for the next scrape
            self.start()
            began, view, took = self._newest()
        else:
            self.start()
            with self._state:
                self._state.wait_for(lambda: (self._last is not None and self._last[0] >= since)
                                     or (self._failed is not None and self._failed[0] >= since), budget)
                if self._last is None and self._failed is None:
                    return None
            began, view, took = self._newest()
        return view, took, time.monotonic() - began

    def recent(self) -> Look:
        """The newest look, for a console page (the first one waited for), a new one started in
        the background when it is stale (see the module's docstring)."""
        with self._state:
            last, typical = self._last, self._typical or 0.0
            stale = last is None or time.monotonic() - last[0] > max(FRESH, (PACE + 1) * typical)
        if stale:
            self.start()
        return self._newest() if last is not None else self._look(float("-inf"))

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
            self._look(time.monotonic())
        except Exception as error:  # said to the next asker, and in the log
            log.warning("cannot read %s: %s", self.home, one_line(error))

    def _look(self, since: float) -> Look:
        """A look that began at ``since`` or later: the newest if it did, else a new one."""
        with self.lock:
            with self._state:
                if self._last is not None and self._last[0] >= since:
                    return self._last
                if self._failed is not None and self._failed[0] >= since:
                    raise self._failed[1]
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
                return self._last
