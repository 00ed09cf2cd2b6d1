"""A home as it is now: each queue's depth, thresholds and recorded flow state, whether it holds
its producers and since when, and whether each consumer is stalled or held back by the queues it
writes to, read from the queues and their tables at the moment of asking.

What the metrics, the console and ``spark-flow why`` show. A look judges nothing and writes
nothing: the flow state is the one the subscriptions table records (gates and the controller
step the machine and record it), so a look is right whether or not a controller runs (the status
table is only the controller's view), and costs what a gate's look costs: the queue's new
commits and a version check of its small tables, queues read sixteen at a time.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Literal

from spark_flow.exceptions import QueueNotFoundError, SubscriptionNotFoundError, one_line
from spark_flow.flow.drain import measured_backlog
from spark_flow.flow.homeflow import HOME_ROW, HomeFlow, home_depth, open_home
from spark_flow.flow.looks import look_at_each
from spark_flow.flow.queue import open_queue
from spark_flow.records.status import control_table
from spark_flow.records.subscriptions import Subscription
from spark_flow.rules.depth import Depth
from spark_flow.rules.flow_state import FlowState, Thresholds, producers_held
from spark_flow.rules.names import normalize_path
from spark_flow.rules.pace import Drained, Pace, paced
from spark_flow.rules.settings import QueueSettings

log = logging.getLogger("spark_flow.ops.view")


@dataclass(frozen=True)
class SubscriptionView:
    """One subscription as its tables say now. ``downstream`` names the queues its consumer
    writes to (a registered queue by name, another by path); ``backpressured``: one of them
    holds its producers, so the consumer is held back, not slow; ``stalled``: it has messages
    and has acknowledged nothing for the queue's ``stallTimeout`` while not backpressured;
    ``acked_at``: its last acknowledgement, None if it has never acknowledged."""

    name: str
    depth: Depth
    age: float
    flow_stopped: bool
    flow_stopped_count: int
    last_transition: datetime | None
    position: int
    discarded_count: int
    expired_count: int
    dead_lettered_count: int
    acked_at: datetime | None
    downstream: tuple[str, ...] = ()
    backpressured: bool | None = False  # None: not known (a status row does not keep it)
    stalled: bool = False
    drain_rate: float | None = None  # messages a second it acknowledges (:mod:`spark_flow.flow.drain`)
    pace: Pace | None = None  # a paced queue's: the rate its producers are admitted at, shared by how many


@dataclass(frozen=True)
class QueueView:
    """One queue as its tables say now; ``error`` says why it could not be read (then it has no
    settings and no subscriptions)."""

    name: str
    path: str
    settings: QueueSettings | None = None
    latest: int = -1
    subscriptions: tuple[SubscriptionView, ...] = ()
    home_stopped: bool = False
    held: bool = False
    held_since: datetime | None = None
    error: str | None = None

    @property
    def depth(self) -> Depth:
        """The queue's depth: per measure its deepest subscription's (what holds its producers)."""
        return Depth.deepest(s.depth for s in self.subscriptions)

    @property
    def thresholds(self) -> Thresholds:
        return self.settings.thresholds if self.settings is not None else Thresholds()

    @property
    def pace(self) -> Pace | None:
        """A paced queue's pace: its slowest subscription's, as its producers' gates take it."""
        return min((s.pace for s in self.subscriptions if s.pace is not None), key=lambda p: p.rate, default=None)

    @property
    def producers_stopped(self) -> bool:
        """Whether an operator stopped the queue's producers (``stop-producers``, applied)."""
        return self.settings is not None and self.settings.producers_stopped


@dataclass(frozen=True)
class HomeView:
    """The home's queues (by name) and its own limits, depth (the sum of its queues') and
    recorded flow state; ``others``: the downstream queues of its consumers that it does not
    register, by path (their ``name`` too)."""

    home: str
    at: datetime
    queues: Mapping[str, QueueView]
    limits: Thresholds = field(default_factory=Thresholds)
    depth: Depth = field(default_factory=Depth)
    state: FlowState = field(default_factory=FlowState)
    last_transition: datetime | None = None
    others: Mapping[str, QueueView] = field(default_factory=dict)
    status_updated: datetime | None = None  # a controller's last write of the status table
    #: ``tables``: read from the queues' tables; ``status``: the controller's last look, from the
    #: status table alone (:mod:`spark_flow.ops.status_view`: no chains, maximums or backpressure).
    read_from: Literal["tables", "status"] = "tables"

    def queue(self, name: str) -> QueueView | None:
        """A queue by name (registered) or path (a downstream queue outside the home)."""
        return self.queues.get(name) or self.others.get(name)


@dataclass
class _Read:
    """A queue's tables as read: its handle's figures before anything is judged."""

    name: str
    path: str
    settings: QueueSettings | None = None
    latest: int = -1
    backlog: Sequence[tuple[Subscription, Depth]] = ()
    drains: Mapping[str, Drained] = field(default_factory=dict)
    home: str | None = None
    producers_changed: datetime | None = None
    error: str | None = None

    def released_at(self) -> datetime | None:
        """When the queue last stopped or let go of its producers (a flow transition of any
        subscription, an operator's stop or start): a consumer held back by this queue is not
        late for the time before."""
        times = [sub.last_transition for sub, _ in self.backlog] + [self.producers_changed]
        return max((t for t in times if t is not None), default=None)


def iso_time(moment: datetime) -> str:
    """A time as every operator's view shows one: ISO 8601 in UTC, to the second, with its zone
    (``2026-11-28T10:52:14Z``), as the console, ``why`` and the CLI's tables do."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def look(home: str, storage_options: Mapping[str, str] | None = None) -> HomeView:
    """Read the home at ``home`` now: every registered queue, the downstream queues of their
    consumers, and the home's limits and recorded flow state. A queue that cannot be read is in
    the view with its ``error``."""
    storage = dict(storage_options or {})
    flow = open_home(normalize_path(home), storage)
    registered = flow.registry.queues()
    reads = look_at_each(registered, storage, lambda name, path: _read(name, path, storage))
    now = datetime.now(UTC)  # after the reads: no message read is younger than the look
    names = {normalize_path(r.path): name for name, r in reads.items()}
    outside = sorted({normalize_path(path) for r in reads.values() for sub, _ in r.backlog for path in sub.downstream}
                     - set(names))
    others = {path: _read(path, path, storage) for path in outside}  # named by path: its name is another home's
    homes: dict[str, tuple[FlowState, datetime | None]] = {}

    def home_stop(read: _Read) -> tuple[bool, datetime | None]:
        """Whether the queue's home holds its producers (its recorded flow state), since when."""
        if read.home is None or read.settings is None or not read.settings.flow_controlled:
            return False, None
        if read.home not in homes:
            homes[read.home] = _home_state(open_home(read.home, storage))
        state, since = homes[read.home]
        return state.flow_stopped, since

    held = {r.path: _held(r, home_stop(r)[0]) for r in [*reads.values(), *others.values()]}
    released = {r.path: r.released_at() for r in [*reads.values(), *others.values()]}

    def view(read: _Read) -> QueueView:
        return _queue_view(read, home_stop(read), held, released, names, now)

    queues = {name: view(r) for name, r in reads.items()}
    state, transition = _home_state(flow)
    limits = flow.thresholds()
    depth = home_depth([s.depth for s in q.subscriptions] for q in queues.values()) if limits.enabled else Depth()
    return HomeView(flow.home, now, queues, limits, depth, state, transition,
                    {path: view(r) for path, r in others.items()}, _status_updated(flow.home, storage))


def _read(name: str, path: str, storage: Mapping[str, str]) -> _Read:
    """A queue's figures: its depth per subscription, its settings in force, its home."""
    try:
        queue = open_queue(path, storage)
        latest = queue.refresh()
        settings = queue.settings()
        measured = measured_backlog(queue)
        return _Read(name, queue.path, settings, latest, [(sub, depth) for sub, depth, _ in measured],
                     {sub.name: drained for sub, _, drained in measured}, queue.home,
                     queue.runtime_settings.changed_at("producersStopped"))
    except Exception as error:  # dropped, moved or unreadable: shown as such, the other queues still are
        said = one_line(error)
        if (path, said) not in _REPORTED:  # once, not at every scrape
            _REPORTED.add((path, said))
            log.warning("cannot read queue %r at %s: %s", name, path, said)
        return _Read(name, normalize_path(path), error=said)


#: The unreadable queues this process has logged, with what it said.
_REPORTED: set[tuple[str, str]] = set()


def _held(read: _Read, home_stopped: bool) -> bool:
    """Whether the queue holds its producers, by the one rule (:func:`~spark_flow.rules.flow_state.producers_held`)."""
    if read.settings is None:
        return False
    return producers_held(flow_stopped=(sub.flow_stopped for sub, _ in read.backlog),
                          producers_stopped=read.settings.producers_stopped, home_stopped=home_stopped)


def _queue_view(read: _Read, home_stop: tuple[bool, datetime | None], held: Mapping[str, bool],
                released: Mapping[str, datetime | None], names: Mapping[str, str], now: datetime) -> QueueView:
    if read.settings is None:
        return QueueView(read.name, read.path, error=read.error)
    now_ms = int(now.timestamp() * 1000)
    subs = []
    for sub, depth in read.backlog:
        downstream = tuple(normalize_path(p) for p in sub.downstream)
        backpressured = any(held.get(p, False) for p in downstream)
        waiting_since = max([t for t in (sub.acked_at or sub.created_at, *(released.get(p) for p in downstream))
                             if t is not None], default=now)
        if depth.oldest is not None:
            waiting_since = max(waiting_since, datetime.fromtimestamp(depth.oldest / 1000, UTC))
        timeout = read.settings.stall_timeout
        stalled = bool(timeout and depth.count and not backpressured and (now - waiting_since).total_seconds() >= timeout)
        drained = read.drains.get(sub.name, Drained())
        pace = paced(read.settings, depth.count, drained)
        subs.append(SubscriptionView(sub.name, depth, depth.age(now_ms), sub.flow_stopped, sub.flow_stopped_count,
                                     sub.last_transition, sub.position, sub.discarded_count, sub.expired_count,
                                     sub.dead_lettered_count, _last_acknowledged(sub),
                                     tuple(names.get(p, p) for p in downstream), backpressured, stalled,
                                     drained.rate, pace))
    is_held = held[read.path]
    return QueueView(read.name, read.path, read.settings, read.latest, tuple(subs), home_stop[0], is_held,
                     _held_since(read, home_stop) if is_held else None)


def _last_acknowledged(sub: Subscription) -> datetime | None:
    """When the subscription last acknowledged, None if never: its row records its creation as
    ``acked_at`` too (a stall's clock starts there), so an ``acked_at`` that is its creation
    time is no acknowledgement."""
    return None if sub.acked_at == sub.created_at else sub.acked_at


def _held_since(read: _Read, home_stop: tuple[bool, datetime | None]) -> datetime | None:
    """Since when a held queue has held its producers: the earliest start among what holds them
    now (a flow-stopped subscription's stop, an operator's stop, its home's stop)."""
    starts = [sub.last_transition for sub, _ in read.backlog if sub.flow_stopped]
    if read.settings is not None and read.settings.producers_stopped:
        starts.append(read.producers_changed)
    if home_stop[0]:
        starts.append(home_stop[1])
    return min((t for t in starts if t is not None), default=None)


def _home_state(flow: HomeFlow) -> tuple[FlowState, datetime | None]:
    """A home's recorded flow state and last transition (none recorded: never limited)."""
    try:
        row = flow.flow.get(HOME_ROW)
    except (QueueNotFoundError, SubscriptionNotFoundError):
        return FlowState(), None
    return row.flow_state, row.last_transition


def _status_updated(home: str, storage: Mapping[str, str]) -> datetime | None:
    """When a controller last wrote the home's status table (its newest commit), None if never."""
    table = control_table(home, "status", storage).open()
    if table is None:
        return None
    commit = table.commit_infos(table.version())
    return datetime.fromtimestamp(commit[0]["timestamp"] / 1000, UTC) if commit else None
