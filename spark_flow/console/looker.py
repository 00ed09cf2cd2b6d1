"""When ``spark-flow serve`` reads its home: one look at a time, shared by the requests that wait
for it, and paced for the console so an open page costs the server the same at any home size.

A scrape asks for the home as it is now: a look that began after it asked, or the one under way
(the time Prometheus records is the scrape's either way). A console page asks every 2 s; a look
of 10,000 queues takes seconds, so the page is answered from the newest look while the next is
read in the background, and a new look starts only once the newest is older than the refresh
and than :data:`PACE` times its own length. Looks then take at most a fifth of the server's
time however many pages are open, and a page says when its figures were read. A look fails as
the home does: the newest failure, if newer than the newest look, is raised to every asker.
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


class Looker:
    """The reader of one home's tables (a table handle is shared by the process and not made
    for two threads at once: :attr:`lock` is held while anything reads or writes through one)."""

    def __init__(self, home: str, storage_options: Mapping[str, str]) -> None:
        self.home, self.storage_options = home, storage_options
        self.lock = threading.RLock()
        self._state = threading.Lock()
        self._last: tuple[float, HomeView, float] | None = None  # began, view, seconds it took
        self._failed: tuple[float, Exception] | None = None  # began, error
        self._reading: float | None = None  # when the look under way began
        self._background: threading.Thread | None = None

    def look(self) -> tuple[HomeView, float]:
        """The home as it is now: a look that began after this call did, or the one under way;
        and how long it took."""
        with self._state:
            since = min(time.monotonic(), self._reading if self._reading is not None else float("inf"))
        return self._look(since)

    def recent(self) -> tuple[HomeView, float]:
        """The newest look for a console page (the first one waited for), a new one started in
        the background when it is stale (see the module's docstring)."""
        with self._state:
            last, failed = self._last, self._failed
            stale = last is None or time.monotonic() - last[0] > max(FRESH, (PACE + 1) * last[2])
        if stale:
            self.start()
        if failed is not None and (last is None or failed[0] > last[0]):
            raise failed[1]
        if last is None:
            return self._look(float("-inf"))
        return last[1], last[2]

    def start(self) -> None:
        """Read the home in the background (at start: the first page and scrape find its tables
        open), unless one is under way."""
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

    def _look(self, since: float) -> tuple[HomeView, float]:
        """A look that began at ``since`` or later: the newest if it did, else a new one."""
        with self.lock:
            with self._state:
                if self._last is not None and self._last[0] >= since:
                    return self._last[1], self._last[2]
                if self._failed is not None and self._failed[0] >= since:
                    raise self._failed[1]
                began = self._reading = time.monotonic()
            try:
                view = look(self.home, self.storage_options)
            except Exception as error:
                with self._state:
                    self._failed, self._reading = (began, error), None
                raise
            took = time.monotonic() - began
            with self._state:
                self._last, self._reading = (began, view, took), None
            return view, took
