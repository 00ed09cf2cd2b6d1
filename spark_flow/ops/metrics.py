"""Prometheus metrics of a home, read at scrape time: every figure of the status table, per queue
and subscription, as the queues and their tables say at that moment (:mod:`spark_flow.ops.view`),
so they are right within one scrape whether or not a controller runs.

Named as Prometheus names things: base units in the name (``_messages``, ``_bytes``,
``_seconds``), counters ending in ``_total``, times as ``_timestamp_seconds``, 0/1 gauges for
states. A threshold or max that is not used (0 in the status table) is not exported, so a
ratio to it in a rule or a dashboard never divides by 0. Served in the text format 0.0.4, whose
gauge ``spark_flow_flow_stopped`` and counter ``spark_flow_flow_stopped_total`` (Qpid's
``flowStopped`` and ``flowStoppedCount``) may share a stem; OpenMetrics would refuse that.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING

from prometheus_client.registry import Collector

from spark_flow.ops.view import HomeView, look

if TYPE_CHECKING:
    from collections.abc import Mapping

    from prometheus_client.metrics_core import Metric

#: The text format served (Prometheus' classic one; see the module's docstring).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

SUBSCRIPTION = ("home", "queue", "subscription")
QUEUE = ("home", "queue")
HOME = ("home",)

#: Every metric served: name (counters without ``_total``), kind, labels, help.
METRICS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("spark_flow_depth_messages", "gauge", SUBSCRIPTION, "Messages enqueued and not yet acknowledged by the subscription."),
    ("spark_flow_depth_bytes", "gauge", SUBSCRIPTION, "Content bytes of the messages not yet acknowledged by the subscription."),
    ("spark_flow_oldest_message_age_seconds", "gauge", SUBSCRIPTION,
     "How long the oldest message not yet acknowledged by the subscription has waited (0: none waits)."),
    ("spark_flow_flow_stopped", "gauge", SUBSCRIPTION, "1 while the subscription is flow-stopped (Qpid flowStopped)."),
    ("spark_flow_flow_stopped", "counter", SUBSCRIPTION, "Flow stops of the subscription (Qpid flowStoppedCount)."),
    ("spark_flow_last_transition_timestamp_seconds", "gauge", SUBSCRIPTION,
     "When the subscription's flow state last changed (Unix time)."),
    ("spark_flow_consumer_stalled", "gauge", SUBSCRIPTION,
     "1 while the subscription has messages and no acknowledgement for its queue's stallTimeout, not backpressured."),
    ("spark_flow_consumer_backpressured", "gauge", SUBSCRIPTION,
     "1 while a queue the subscription's consumer writes to holds its producers."),
    ("spark_flow_discarded_messages", "counter", SUBSCRIPTION,
     "Messages skipped for the subscription without delivery (ring policies, stalledConsumerPolicy=skip)."),
    ("spark_flow_expired_messages", "counter", SUBSCRIPTION,
     "Messages older than the queue's messageTtl, no longer delivered to the subscription."),
    ("spark_flow_dead_lettered_messages", "counter", SUBSCRIPTION,
     "Messages the subscription's consumer failed on maxDeliveries times, moved to the dead-letter queue."),
    ("spark_flow_acknowledged_version", "gauge", SUBSCRIPTION, "The queue version the subscription has acknowledged whole."),
    ("spark_flow_drain_messages_per_second", "gauge", SUBSCRIPTION,
     "Messages a second the subscription's consumer takes from the queue, as this server's looks measure it (last 10 s)."),
    ("spark_flow_admitted_messages_per_second", "gauge", SUBSCRIPTION,
     "A paced queue's pace: messages a second its producers are admitted at by this subscription; absent: not paced."),
    ("spark_flow_pacing_producers", "gauge", SUBSCRIPTION,
     "A paced queue's producers that wrote in the last 10 s: each is admitted at an equal share of the pace."),
    ("spark_flow_producers_held", "gauge", QUEUE,
     "1 while the queue holds its producers: a subscription flow-stopped, an operator's stop, or its home flow-stopped."),
    ("spark_flow_producers_held_since_timestamp_seconds", "gauge", QUEUE,
     "Since when the queue has held its producers (Unix time); absent while it does not."),
    ("spark_flow_producers_stopped", "gauge", QUEUE, "1 while an operator has stopped the queue's producers (stop-producers)."),
    ("spark_flow_stop_messages", "gauge", QUEUE, "Flow stops when a depth exceeds this many messages (stopCount); absent: not used."),
    ("spark_flow_resume_messages", "gauge", QUEUE, "Flow resumes when every depth is under this many messages (resumeCount)."),
    ("spark_flow_stop_bytes", "gauge", QUEUE, "Flow stops when a depth exceeds this many bytes (stopSize); absent: not used."),
    ("spark_flow_resume_bytes", "gauge", QUEUE, "Flow resumes when every depth is under this many bytes (resumeSize)."),
    ("spark_flow_stop_age_seconds", "gauge", QUEUE,
     "Flow stops when the oldest message has waited longer than this (stopAge); absent: not used."),
    ("spark_flow_resume_age_seconds", "gauge", QUEUE, "Flow resumes when the oldest message has waited less than this (resumeAge)."),
    ("spark_flow_max_messages", "gauge", QUEUE, "The queue's maximum in messages (maxCount); absent: none."),
    ("spark_flow_max_bytes", "gauge", QUEUE, "The queue's maximum in bytes (maxSize); absent: none."),
    ("spark_flow_latest_version", "gauge", QUEUE, "The queue table's latest Delta version."),
    ("spark_flow_queue_up", "gauge", QUEUE, "1 if the queue could be read at this scrape, 0 if not (its other metrics are absent)."),
    ("spark_flow_home_depth_messages", "gauge", HOME,
     "The home's depth: the sum over its queues of each one's deepest subscription; with home-wide limits only."),
    ("spark_flow_home_depth_bytes", "gauge", HOME, "The home's depth in bytes; with home-wide limits only."),
    ("spark_flow_home_flow_stopped", "gauge", HOME, "1 while the home is flow-stopped by its home-wide limits."),
    ("spark_flow_home_flow_stopped", "counter", HOME, "Flow stops of the home by its home-wide limits."),
    ("spark_flow_home_stop_messages", "gauge", HOME, "homeStopCount; absent: not used."),
    ("spark_flow_home_resume_messages", "gauge", HOME, "homeResumeCount; absent: not used."),
    ("spark_flow_home_stop_bytes", "gauge", HOME, "homeStopSize; absent: not used."),
    ("spark_flow_home_resume_bytes", "gauge", HOME, "homeResumeSize; absent: not used."),
    ("spark_flow_home_up", "gauge", HOME,
     "1 if the home's registry could be read at this scrape, 0 if not (storage unreachable or refused; nothing else is served)."),
    ("spark_flow_queues", "gauge", HOME, "Queues registered in the home."),
    ("spark_flow_status_updated_timestamp_seconds", "gauge", HOME,
     "When a flow controller last wrote the home's status table (Unix time); absent: never."),
    ("spark_flow_scrape_duration_seconds", "gauge", HOME, "How long reading the home's queues took for the look this scrape serves."),
    ("spark_flow_look_age_seconds", "gauge", HOME,
     "How long before this scrape the look it serves began (a home slower to read than a second is read in the background)."),
)

#: The series of one look: per metric (name, kind), each series' label values and value.
Series = dict[tuple[str, str], list[tuple[tuple[str, ...], float]]]


def metric_names() -> list[str]:
    """Every series name served (counters with ``_total``): what rules and dashboards may use."""
    return [name + ("_total" if kind == "counter" else "") for name, kind, _, _ in METRICS]


def series(view: HomeView, duration: float = 0.0, age: float = 0.0) -> Series:
    """The series of one look at a home, read ``duration`` seconds long and begun ``age`` seconds ago."""
    found: Series = {(name, kind): [] for name, kind, _, _ in METRICS}

    def add(name: str, labels: tuple[str, ...], value: float | None, kind: str = "gauge") -> None:
        if value is not None:
            found[(name, kind)].append((labels, float(value)))

    home = view.home
    for queue in view.queues.values():
        q = (home, queue.name)
        add("spark_flow_queue_up", q, queue.error is None)
        if queue.settings is None:
            continue
        settings, thresholds = queue.settings, queue.thresholds
        add("spark_flow_producers_held", q, queue.held)
        add("spark_flow_producers_held_since_timestamp_seconds", q, _unix(queue.held_since))
        add("spark_flow_producers_stopped", q, settings.producers_stopped)
        for name, stop, resume in (("messages", thresholds.stop_count, thresholds.resume_count),
                                   ("bytes", thresholds.stop_size, thresholds.resume_size),
                                   ("age_seconds", thresholds.stop_age, thresholds.resume_age)):
            if stop:
                add(f"spark_flow_stop_{name}", q, stop)
                add(f"spark_flow_resume_{name}", q, resume)
        add("spark_flow_max_messages", q, settings.max_count or None)
        add("spark_flow_max_bytes", q, settings.max_size or None)
        add("spark_flow_latest_version", q, queue.latest)
        for sub in queue.subscriptions:
            s = (*q, sub.name)
            add("spark_flow_depth_messages", s, sub.depth.count)
            add("spark_flow_depth_bytes", s, sub.depth.size)
            add("spark_flow_oldest_message_age_seconds", s, sub.age)
            add("spark_flow_flow_stopped", s, sub.flow_stopped)
            add("spark_flow_flow_stopped", s, sub.flow_stopped_count, "counter")
            add("spark_flow_last_transition_timestamp_seconds", s, _unix(sub.last_transition))
            add("spark_flow_consumer_stalled", s, sub.stalled)
            add("spark_flow_consumer_backpressured", s, sub.backpressured)
            add("spark_flow_discarded_messages", s, sub.discarded_count, "counter")
            add("spark_flow_expired_messages", s, sub.expired_count, "counter")
            add("spark_flow_dead_lettered_messages", s, sub.dead_lettered_count, "counter")
            add("spark_flow_acknowledged_version", s, sub.position)
            add("spark_flow_drain_messages_per_second", s, sub.drain_rate)
            if sub.pace is not None:
                add("spark_flow_admitted_messages_per_second", s, sub.pace.rate)
                add("spark_flow_pacing_producers", s, sub.pace.producers)
    h = (home,)
    if view.limits.enabled or view.state.flow_stopped_count:
        add("spark_flow_home_depth_messages", h, view.depth.count)
        add("spark_flow_home_depth_bytes", h, view.depth.size)
        add("spark_flow_home_flow_stopped", h, view.state.flow_stopped)
        add("spark_flow_home_flow_stopped", h, view.state.flow_stopped_count, "counter")
        limits = view.limits
        for name, value in (("stop_messages", limits.stop_count), ("resume_messages", limits.resume_count),
                            ("stop_bytes", limits.stop_size), ("resume_bytes", limits.resume_size)):
            add(f"spark_flow_home_{name}", h, value or None)
    add("spark_flow_home_up", h, 1)
    add("spark_flow_queues", h, len(view.queues))
    add("spark_flow_status_updated_timestamp_seconds", h, _unix(view.status_updated))
    add("spark_flow_scrape_duration_seconds", h, duration)
    add("spark_flow_look_age_seconds", h, age)
    return found


def families(view: HomeView, duration: float = 0.0) -> list[Metric]:
    """The metrics of one look, as ``prometheus_client``'s families (a collector's)."""
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    made: list[Metric] = []
    found = series(view, duration)
    for name, kind, labels, text in METRICS:
        if found[(name, kind)]:
            family = (CounterMetricFamily(name, text, labels=list(labels)) if kind == "counter"
                      else GaugeMetricFamily(name, text, labels=list(labels)))
            for values, value in found[(name, kind)]:
                family.add_metric(list(values), value)
            made.append(family)
    return made


def _unix(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


class FlowCollector(Collector):
    """A ``prometheus_client`` collector of one home: each ``collect()`` (each scrape) reads
    the home now.

    Parameters
    ----------
    home : str
        The control plane's location (``spark.flow.home``).
    storage_options : mapping, optional
        deltalake storage options (object store credentials; never in a metric).

    Examples
    --------
    >>> from prometheus_client import CollectorRegistry, generate_latest
    >>> registry = CollectorRegistry(auto_describe=False)
    >>> registry.register(FlowCollector("/data/flow"))
    >>> print(generate_latest(registry).decode())
    """

    def __init__(self, home: str, storage_options: Mapping[str, str] | None = None) -> None:
        self.home = home
        self.storage_options = dict(storage_options or {})

    def collect(self) -> Iterator[Metric]:
        began = time.perf_counter()
        view = look(self.home, self.storage_options)
        yield from families(view, time.perf_counter() - began)


def exposition(view: HomeView, duration: float = 0.0, age: float = 0.0) -> bytes:
    """The metrics of one look as the text format serves them."""
    return _text(series(view, duration, age))


def unreadable(home: str, duration: float) -> bytes:
    """The metrics of a look that could not read the home: ``spark_flow_home_up 0`` and how long
    it tried, so an alert tells a dead storage from a dead ``serve`` (Prometheus' ``up``)."""
    return _text({("spark_flow_home_up", "gauge"): [((home,), 0.0)],
                  ("spark_flow_scrape_duration_seconds", "gauge"): [((home,), duration)]})


def reading(home: str, duration: float) -> bytes:
    """The metrics of a scrape that came before the first look at the home ended (serve's first
    look of a big home opens every table): only how long that look has taken so far."""
    return _text({("spark_flow_scrape_duration_seconds", "gauge"): [((home,), duration)]})


def _text(found: Series) -> bytes:
    """The text format 0.0.4, as ``prometheus_client`` writes it (HELP, TYPE, then each series;
    a counter named with ``_total``), written directly: a home of 10,000 queues has 160,000
    series, 1.8 s through ``prometheus_client``'s objects, a fifth of that so."""
    from prometheus_client.utils import floatToGoString

    number: Callable[[float], str] = floatToGoString  # as prometheus_client writes a value (8.0, 1.79e+09, +Inf)
    out: list[str] = []
    labelled: dict[tuple[str, ...], str] = {}
    for name, kind, labels, text in METRICS:
        rows = found.get((name, kind))
        if not rows:
            continue
        shown = f"{name}_total" if kind == "counter" else name
        out.append(f"# HELP {shown} {_escape(text, quotes=False)}\n# TYPE {shown} {kind}\n")
        for values, value in rows:
            braces = labelled.get(values)
            if braces is None:
                braces = labelled[values] = "{" + ",".join(f'{key}="{_escape(v)}"' for key, v in zip(labels, values, strict=True)) + "}"
            out.append(f"{shown}{braces} {number(value)}\n")
    return "".join(out).encode()


def _escape(value: str, *, quotes: bool = True) -> str:
    """A label value (``quotes``) or a help text as the text format escapes it."""
    value = value.replace("\\", "\\\\").replace("\n", "\\n")
    return value.replace('"', '\\"') if quotes else value
