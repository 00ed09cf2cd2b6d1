"""A process's Spark conf supplies the queue and home settings nobody has recorded yet.

Settings are one per queue (and per home), recorded with it, so every process judges it alike
(docs/design.md 2.1). A process that declares a queue or writes to it records the settings its Spark conf
gives explicitly (``spark.flow.stopCount``, ``spark.flow.queues.<pattern>.<key>``,
``spark.flow.homeStopCount``) where the queue or home has none recorded; a conf value that
differs from the recorded one is not applied and is logged once, naming both values and how to
change the recorded one. The whole is checked before anything is written, a dead-letter queue it
names too (:func:`~spark_flow.flow.dead_letter_queue.check_dead_letter_queue`); a conf's
``deadLetterQueue`` is not given to the queue it names.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from spark_flow.flow.dead_letter_queue import KEY as DEAD_LETTER_QUEUE
from spark_flow.flow.dead_letter_queue import Origin, catalog_name, check_dead_letter_queue, conf_for_queue, registered
from spark_flow.rules.keys import HOME_KEYS, KEYS, PROPERTY_PREFIX, conf_settings, is_setting, setting_name
from spark_flow.rules.settings import QueueSettings, home_thresholds, queue_settings
from spark_flow.store.table import open_table, retry_commit

if TYPE_CHECKING:
    from spark_flow.flow.homeflow import HomeFlow
    from spark_flow.flow.queue import Queue
    from spark_flow.rules.flow_state import Thresholds

log = logging.getLogger("spark_flow.flow.queue")


def record_queue_conf(queue: Queue, conf: Mapping[str, Any]) -> QueueSettings:
    """Record the queue settings ``conf`` gives for ``queue`` that the queue has none recorded
    for; return the settings in force. The record is a compare-and-set on the table's metadata
    (a concurrent recorder makes it read again)."""
    locate = registered(queue.home, queue.storage_options)
    given = conf_for_queue(conf_settings(queue.name, conf, "queue"), queue.path, catalog_name(queue), locate)
    if not given:
        queue.refresh()
        return queue.settings()

    def attempt() -> dict[str, tuple[str, Any]]:
        table = open_table(queue.path, queue.storage_options)
        properties, runtime = table.properties(), queue.runtime_settings.current()
        recorded = {setting_name(k) for k in [*properties, *runtime] if is_setting(k)}
        missing = {name: entry for name, entry in given.items() if name not in recorded}
        if missing:
            settings = queue_settings(queue.name, properties, dict(missing.values()), runtime)  # the whole must hold
            if DEAD_LETTER_QUEUE in missing:
                check_dead_letter_queue(settings, Origin.of(queue), locate, queue.storage_options)
            table.set_properties({PROPERTY_PREFIX + n: str(raw) for n, (_k, raw) in missing.items()})
        return missing

    missing = retry_commit(attempt)
    queue.refresh()
    settings = queue.settings()
    for name, (key, raw) in given.items():
        if name not in missing:
            _report_difference(settings, name, key, raw)
    return settings


def record_home_conf(home: HomeFlow, conf: Mapping[str, Any]) -> Thresholds:
    """Record the home limits ``conf`` gives that ``home`` has none recorded for; returns the
    limits in force."""
    given = conf_settings("", conf, "home")
    recorded = home.settings_table.current()
    missing = {key: raw for name, (key, raw) in given.items() if name in HOME_KEYS and name not in recorded}
    if missing:
        home_thresholds(recorded, missing)  # raises naming the conf's keys, before anything is written
        home.settings_table.fill({setting_name(key): str(raw) for key, raw in missing.items()})
    return home.thresholds()


_REPORTED: set[tuple[str, str, str]] = set()


def _report_difference(settings: QueueSettings, name: str, key: str, raw: Any) -> None:
    """Log, once per process, a conf value that is not applied because the queue records another."""
    if KEYS[name].parse(key, raw) == settings.values[name] or (settings.queue, key, str(raw)) in _REPORTED:
        return
    _REPORTED.add((settings.queue, key, str(raw)))
    log.warning("queue %r: %s=%s (Spark conf) is not applied: the queue's %s is %s (%s), one value for every "
                "process of the queue; to change it: spark-flow set %s %s=%s", settings.queue, key, raw, name,
                settings.values[name], settings.origins[name], settings.queue, name, raw)
