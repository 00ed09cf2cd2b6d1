"""The controller where only the engine reaches the storage (governed compute: Unity Catalog's
credentials are the JVM's). Its observations cannot come from the ``flowcontrol`` source, whose
looks run in a Python worker that has no session and no credentials, so this controller is a
foreachBatch of a ``rate`` stream, a tick a trigger: in its batch it looks at the home's queues
itself through the session (as gates do), steps each subscription's machine (the same pure
:func:`~spark_flow.controller.step.step`), and writes as :class:`ControllerSink` does.

Its machines' state is kept in memory, not in a checkpoint: a restarted controller adopts the
flow state the subscriptions table records (the one record gates follow, so no stop is counted
twice), and its stall clocks and held-since times start again. Operator commands are applied
by their issuers at once; this controller applies those issued while it runs again, by id
(nothing changes), and records them in the history.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any

from spark_flow.controller.observation import as_observation, command_rows, observe
from spark_flow.controller.sink import ControllerSink
from spark_flow.controller.step import Machines, as_row, step_machines
from spark_flow.records.commands import CommandLog
from spark_flow.records.home import Registry

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


class EngineControllerSink:
    """foreachBatch of the engine's controller (see the module's docstring): ``forget_after_ms``
    without an observation removes a queue's or subscription's status row."""

    def __init__(self, home: str, query_name: str, storage_options: Mapping[str, str], forget_after_ms: int) -> None:
        self.home = home
        self.storage_options = dict(storage_options)
        self.forget_after_ms = forget_after_ms
        self.sink = ControllerSink(home, query_name, storage_options)
        self.machines: Machines = {}
        self.commands_after: int | None = None  # the newest command id taken; None before the first batch

    @cached_property
    def registry(self) -> Registry:
        """The home's registry, opened at the first batch (where the function runs: a Connect
        server's worker) and kept: it reads its rows again only when they changed."""
        return Registry(self.home, self.storage_options)

    @cached_property
    def command_log(self) -> CommandLog:
        """The home's commands, opened at the first batch and kept."""
        return CommandLog(self.home, self.storage_options)

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        observed = [*map(as_observation, observe(self.registry.queues(), self.storage_options)), *self._commands()]
        rows = step_machines(self.machines, observed, int(time.time() * 1000), self.forget_after_ms)
        self.sink.write(batch.sparkSession, [as_row(row) for row in rows], batch_id)

    def _commands(self) -> list[dict[str, Any]]:
        """The commands issued since the last batch (none before the first: their issuers applied them)."""
        latest = self.command_log.latest()
        after, self.commands_after = self.commands_after, latest
        if after is None or latest <= after:
            return []
        return [as_observation(row) for row in command_rows(self.home, self.storage_options, after, latest)]
