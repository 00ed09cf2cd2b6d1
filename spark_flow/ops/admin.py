"""The operator's API over a home: :class:`FlowAdmin` (the ``spark-flow`` CLI, the console and
notebooks use it). It reads the registry, status and history tables, issues commands and
deletes queues; it needs no SparkSession.

A command is recorded (the commands table: its id, its issuer), then applied at once to each
queue it names, as a controller applies it: the queue's run-time settings, which every gate reads
at its next look, so it takes effect within one poll interval whether or not a controller runs.
Neither judges a flow state (gates and the controller still do, with those settings). What an
operator cannot apply now (storage refused the write) waits for a controller, which applies the
commands in order, or for the next command issued for that queue, whose issuer applies the ones
before it first; the answer (:class:`Issued`) says which.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spark_flow.exceptions import ConfigurationError, HistoryNotFoundError, QueueNotFoundError, one_line
from spark_flow.flow.dead_letter_queue import KEY as DEAD_LETTER_QUEUE
from spark_flow.flow.dead_letter_queue import Origin, check_dead_letter_queue, dead_letter_queue, registered, replay
from spark_flow.flow.deletion import DeletedQueue, delete_queue
from spark_flow.flow.homeflow import HOME_QUEUE, HOME_ROW, open_home
from spark_flow.flow.looks import READS_AT_ONCE
from spark_flow.flow.queue import Queue, open_queue
from spark_flow.records.commands import (
    ALL_QUEUES,
    HOME_COMMANDS,
    Command,
    CommandLog,
    Issuer,
    command_settings,
    with_settings,
)
from spark_flow.records.home import Registry
from spark_flow.records.status import control_table, status_schema
from spark_flow.records.subscriptions import DEFAULT_SUBSCRIPTION, Subscription
from spark_flow.rules.keys import QUEUE_KEYS, home_setting, pattern_matches, queue_setting
from spark_flow.rules.names import normalize_path, queue_ref
from spark_flow.rules.settings import home_thresholds, queue_settings

if TYPE_CHECKING:
    import pandas as pd

#: The commands an operator issues on queues (:meth:`FlowAdmin.issue`).
COMMANDS = ("stop-producers", "start-producers", "set", "unset")
#: Queue settings an operator can ``set``: ``producersStopped`` has its own commands.
SETTABLE = tuple(name for name in QUEUE_KEYS if name != "producersStopped")


@dataclass(frozen=True)
class Issued:
    """What became of a command: its ``id``, the queues it was ``applied`` to (their gates obey
    it from their next look) and those it is ``pending`` for, with why (a controller applies it)."""

    id: int
    command: str
    target: str
    changes: Mapping[str, str | None] = field(default_factory=dict)
    applied: tuple[str, ...] = ()
    pending: Mapping[str, str] = field(default_factory=dict)

    @property
    def message(self) -> str:
        """The answer an operator reads: ``command 7: set stopCount=900 on 'events': applied to events
        (...)``, ``command 8: stop-producers 'events': ...``."""
        changes = "".join(f" {key}" if value is None else f" {key}={value}" for key, value in self.changes.items())
        said = [f"applied to {', '.join(self.applied)} (producers' gates obey it from their next look)"] if self.applied else []
        said += [f"pending for {queue} until a flow controller or its next command applies it: {why}" for queue, why in self.pending.items()]
        what = f"{self.command}{changes} on {self.target!r}" if changes else f"{self.command} {self.target!r}"
        return f"command {self.id}: {what}: {'; '.join(said)}"


class FlowAdmin:
    """The operator's view of a home: queues, status, history, and commands.

    Parameters
    ----------
    home : str
        The control plane's location (``spark.flow.home``).
    storage_options : mapping, optional
        deltalake storage options (object store credentials).

    Examples
    --------
    >>> admin = FlowAdmin("/data/flow")
    >>> admin.status()                            # a pandas DataFrame, one row per queue/subscription
    >>> admin.stop_producers("events")            # hold every producer of queue events
    >>> admin.set("events", stopCount=900, resumeCount=500)
    >>> admin.set_home(homeStopCount=100_000)     # hold every producer while the home's queues hold more
    >>> admin.plot("events", "/tmp/events.png")
    >>> admin.delete_queue("events", if_unused=True)  # refused while a query reads it
    >>> admin.why("events")                       # the stage that holds its producers, down the pipeline
    """

    def __init__(self, home: str, storage_options: Mapping[str, str] | None = None, *,
                 issuer: Issuer | None = None) -> None:
        self.home = normalize_path(home)
        self.storage_options = dict(storage_options or {})
        self.issuer = issuer or Issuer.this_process("python")  # recorded with each command
        self.registry = Registry(self.home, self.storage_options)
        self.commands = CommandLog(self.home, self.storage_options)
        self._status = control_table(self.home, "status", self.storage_options)
        self._history = control_table(self.home, "history", self.storage_options)

    def queues(self) -> dict[str, str]:
        """The registered queues: name -> table location."""
        return self.registry.queues()

    def register(self, path: str) -> Queue:
        """Register the queue declared at ``path`` (queues declared with ``spark.flow.home`` set
        are registered already)."""
        queue = Queue(path, self.storage_options)
        self.registry.register(queue.name, queue.path)
        return queue

    def queue(self, name: str) -> Queue:
        """The handle of registered queue ``name``."""
        queues = self.queues()
        if name not in queues:
            raise QueueNotFoundError(name, f"not registered in {self.home}: allowed is one of "
                                           f"{', '.join(map(repr, queues)) or 'none (declare one)'}")
        return open_queue(queues[name], self.storage_options)

    def matching(self, target: str) -> list[str]:
        """The registered queues a target names: a queue name or an ActiveMQ-style pattern
        (``*`` one segment, a trailing ``>`` the rest; ``>`` alone is every queue)."""
        queues = self.queues()
        names = [name for name in queues if name == target or pattern_matches(target, name)]
        if not names:
            raise QueueNotFoundError(target, "no registered queue matches: allowed is a queue name or pattern "
                                             f"matching one of {', '.join(map(repr, queues)) or 'none'}")
        return names

    def subscriptions(self, queue: str) -> list[Subscription]:
        """The subscriptions of ``queue``: positions and flow state."""
        return self.queue(queue).subscriptions.list()

    def dead_letters(self, queue: str) -> Queue:
        """The dead-letter queue of ``queue`` (its ``deadLetterQueue``, else ``<queue path>_dlq``):
        its messages, with where each came from and why, are read like any queue's."""
        origin = self.queue(queue)
        location = dead_letter_queue(origin, origin.settings())
        if queue_ref(location).table is not None:  # a catalog name: the home registered it
            return self.queue(location)
        return open_queue(location, self.storage_options)

    def replay_dead_letters(self, queue: str) -> int:
        """Append the messages of ``queue``'s dead-letter queue not replayed yet back into
        ``queue`` (once: replaying again replays nothing twice); returns how many."""
        return replay(self.dead_letters(queue), self.queue(queue))

    def stop_producers(self, target: str = ALL_QUEUES) -> int:
        """Hold every producer of the queues ``target`` names, whatever their depth; returns the
        command id. Applied at once (see the module's docstring); gates obey it from their next look."""
        return self.issue("stop-producers", target).id

    def start_producers(self, target: str = ALL_QUEUES) -> int:
        """Undo :meth:`stop_producers`; the queues' thresholds decide again."""
        return self.issue("start-producers", target).id

    def issue(self, command: str, target: str, changes: Mapping[str, str | None] | None = None,
              issuer: Issuer | None = None) -> Issued:
        """Check command ``command`` (``stop-producers``, ``start-producers``, ``set``, ``unset``
        with its ``changes``) on the queues ``target`` names, record it with its issuer (this
        admin's unless given), apply it to each queue now, and say what became of it."""
        if command not in COMMANDS:
            raise ConfigurationError("command", command, ", ".join(COMMANDS))
        names = self.matching(target)
        if command == "set":
            changes = {_settable(key, value): str(value) for key, value in (changes or {}).items()}
        elif command == "unset":
            changes = {_settable(key, None): None for key in (changes or {})}
        if command in ("set", "unset"):
            if not changes:
                raise ConfigurationError("settings", changes, "at least one setting, e.g. stopCount=900")
            self._check(names, changes)
        command_id = self.commands.append(command, target, changes, issuer or self.issuer)
        registered = self.queues()

        def look(name: str) -> tuple[Queue, int] | str:
            try:
                queue = open_queue(registered[name], self.storage_options)
                return queue, queue.runtime_settings.applied()
            except Exception as error:
                return one_line(error)

        with ThreadPoolExecutor(READS_AT_ONCE) as pool:  # every queue of a home at once: mostly waiting on storage
            looked = dict(zip(names, pool.map(look, names), strict=True))
            floor = min((found[1] for found in looked.values() if not isinstance(found, str)), default=command_id - 1)
            backlog = self.commands.read(floor, command_id)  # this command, and any earlier one not applied
            outcomes = dict(zip(names, pool.map(lambda name: _catch_up(name, looked[name], backlog), names), strict=True))
        applied = tuple(name for name, why in outcomes.items() if why is None)
        pending = {name: why for name, why in outcomes.items() if why is not None}
        return Issued(command_id, command, target, dict(changes or {}), applied, pending)

    def set(self, target: str, settings: Mapping[str, Any] | None = None, **more: Any) -> int:
        """Change settings (``stopCount=900``, ``resumeSize="8m"``, ``policy="ring"``) of the
        queues ``target`` names at run time; returns the command id. Each queue's settings as
        they will be, with the commands issued before this one, are checked whole before the
        command is written: a change that would make a queue invalid is refused here, and so is
        a ``deadLetterQueue`` that cannot take its dead letters (the queue itself, a cycle of
        dead-letter queues, an existing table with other columns)."""
        return self.issue("set", target, {**dict(settings or {}), **more}).id

    def unset(self, target: str, *keys: str) -> int:
        """Remove run-time settings of the queues ``target`` names: each goes back to the value
        recorded with the queue (its table property) or the default; returns the command id."""
        if not keys:
            raise ConfigurationError("keys", keys, "at least one setting to remove, e.g. stopCount")
        return self.issue("unset", target, dict.fromkeys(keys)).id

    def set_home(self, settings: Mapping[str, Any] | None = None, **more: Any) -> int:
        """Change the home's limits (``homeStopCount=100000``, ``homeResumeSize="1g"``): checked
        whole, then recorded with the home at once (the controller records the command's history);
        every gate judges with them from its next look. Returns the command id."""
        wanted = {**dict(settings or {}), **more}
        if not wanted:
            raise ConfigurationError("settings", wanted, "at least one home setting, e.g. homeStopCount=100000")
        return self._change_home("set-home", {home_setting(key, value): str(value) for key, value in wanted.items()})

    def unset_home(self, *keys: str) -> int:
        """Remove home limits (``homeStopCount``): without any, the home holds nobody."""
        if not keys:
            raise ConfigurationError("keys", keys, "at least one home setting to remove, e.g. homeStopCount")
        return self._change_home("unset-home", {home_setting(key, None): None for key in keys})

    def _change_home(self, command: str, changes: Mapping[str, str | None]) -> int:
        home = open_home(self.home, self.storage_options)
        home_thresholds(with_settings(home.settings_table.current(), changes))  # refused whole, before any write
        command_id = self.commands.append(command, HOME_QUEUE, changes, self.issuer)
        home.settings_table.apply(changes, command_id)
        return command_id

    def _check(self, names: list[str], changes: Mapping[str, str | None]) -> None:
        """Refuse ``changes`` whole, before anything is written, if they would make one of the
        queues ``names`` invalid."""
        for name in names:
            queue = self.queue(name)
            runtime = with_settings(self._pending(queue), changes)
            settings = queue_settings(name, queue.properties(), runtime)
            if changes.get(DEAD_LETTER_QUEUE) is not None:
                check_dead_letter_queue(settings, Origin.of(queue), registered(self.home, self.storage_options),
                                        self.storage_options)

    def _pending(self, queue: Queue) -> dict[str, str]:
        """A queue's run-time settings once the commands issued and not yet applied are."""
        runtime = queue.runtime_settings.current()
        for command in self.commands.read(queue.runtime_settings.applied()):
            if command.target == queue.name or pattern_matches(command.target, queue.name):
                runtime = with_settings(runtime, command_settings(command.command, command.settings))
        return runtime

    def delete_queue(self, name: str, *, if_empty: bool = False, if_unused: bool = False) -> DeletedQueue:
        """Delete queue ``name``: its table, its state location (subscriptions, history, run-time
        settings, hold times, writer claims), its registration and status rows, at once. Its
        producers and consumers fail at their next look with :class:`QueueNotFoundError`, and
        nothing is written in its place again.

        ``if_empty`` refuses while a subscription has messages it has not acknowledged,
        ``if_unused`` while a live query reads one (RabbitMQ's ``delete_queue`` guards). A queue
        declared by its catalog name is dropped through the engine; a catalog table declared by
        path is refused (drop it in Spark first). A refusal raises
        :class:`~spark_flow.exceptions.QueueDeleteRefusedError` and removes nothing.
        """
        return delete_queue(self.home, name, self.storage_options, if_empty=if_empty, if_unused=if_unused)

    def status(self, target: str | None = None) -> pd.DataFrame:
        """The status table (as the controller last wrote it), optionally for the queues ``target``
        names. A home with limits has its own row: queue ``>`` (every queue), subscription ``home``."""
        import pandas as pd

        rows = self._status.rows()
        frame = pd.DataFrame(rows, columns=status_schema().names)
        if target is not None:
            names = self.matching(target) + ([HOME_QUEUE] if target == ALL_QUEUES else [])
            frame = frame[frame["queue"].isin(names)]
        return frame.sort_values(["queue", "subscription"]).reset_index(drop=True)

    def history(self, queue: str, subscription: str = DEFAULT_SUBSCRIPTION) -> list[dict[str, Any]]:
        """The controller's samples and events for one subscription, oldest first (the home's:
        queue ``>``, subscription ``home``)."""
        if queue == HOME_QUEUE:
            subscription = HOME_ROW
        else:
            self.queue(queue)
        rows = self._history.rows()
        mine = [r for r in rows if r["queue"] == queue and r["subscription"] in (subscription, "")]
        return sorted(mine, key=lambda r: r["time"])

    def why(self, queue: str) -> list[str]:
        """Why ``queue`` holds its producers, read from the tables now: one line per stage down
        the pipeline to the root cause (``spark-flow why``; :mod:`spark_flow.ops.why`)."""
        from spark_flow.ops.view import look
        from spark_flow.ops.why import explain

        return [stage.line() for stage in explain(look(self.home, self.storage_options), queue)]

    def plot(self, queue: str, path: str | Path, subscription: str = DEFAULT_SUBSCRIPTION) -> Path:
        """A PNG of the subscription's depth against its thresholds over time, stopped intervals
        shaded; queue ``>`` plots the home's depth against its home-wide limits."""
        from spark_flow.ops.plot import depth_points, plot_depth

        subscription = HOME_ROW if queue == HOME_QUEUE else subscription

        samples = [r for r in self.history(queue, subscription) if r["event"] == "sample"]
        if not samples:
            raise HistoryNotFoundError(f"queue {queue!r}: the history in {self.home} has no samples of subscription "
                                       f"{subscription!r} yet: is the controller running?")
        recorded = open_home(self.home, self.storage_options).history if queue == HOME_QUEUE else self.queue(queue).history
        transitions = [r for r in recorded.read() if r["subscription"] == subscription]
        return plot_depth(depth_points(samples, transitions), None, path,
                          title=f"queue {queue!r}, subscription {subscription!r}")


def _catch_up(name: str, looked: tuple[Queue, int] | str, backlog: list[Command]) -> str | None:
    """Apply to queue ``name``, in order, each command of ``backlog`` that names it and that it
    has not applied (the one issued now, and any an earlier issuer could not apply), as a
    controller applies them: None when done, else why not (a controller applies them later). An
    earlier command that would now make the queue invalid is passed over, as a controller passes
    it over (recording why)."""
    if isinstance(looked, str):
        return looked
    queue, applied = looked
    runtime = queue.runtime_settings
    try:
        for command in backlog:
            if (command.id <= applied or command.command in HOME_COMMANDS
                    or not (command.target == name or pattern_matches(command.target, name))):
                continue
            settings = command_settings(command.command, command.settings)
            try:
                queue_settings(name, queue.properties(), with_settings(runtime.current(), settings))
            except ConfigurationError:
                if command is backlog[-1]:
                    raise
                continue
            runtime.apply(settings, command.id)
    except Exception as error:
        return one_line(error)
    return None


def _settable(key: str, value: Any) -> str:
    """The queue setting a ``set`` or ``unset`` key names (``stopCount``, ``flow.stopCount``,
    ``qpid.flow_stop_count``); producer settings and operator states are refused."""
    if queue_setting(key, value, QUEUE_KEYS) == "producersStopped":
        raise ConfigurationError(key, value, "a queue setting: " + ", ".join(SETTABLE),
                                 "producersStopped has its own commands, stop-producers and start-producers")
    return queue_setting(key, value, SETTABLE)
