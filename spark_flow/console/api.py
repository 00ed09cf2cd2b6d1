"""What the console shows and does, as JSON for its page: the home's queues (depth, thresholds,
flow state, held producers, stalled consumers), the pipeline graph with the root causes of
holds marked, a queue's depth chart, and the operator's actions.

The figures are a look at the home now (:mod:`spark_flow.ops.view`), the same the metrics serve;
a chart adds what the controller sampled (its history table) and the queue's own transitions
(the held intervals), so it has a past whether or not a controller ran. Actions are
:class:`~spark_flow.ops.admin.FlowAdmin`'s, checked the same way as on the command line. Nothing
here carries a storage option: no credential reaches a page.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from spark_flow.exceptions import ConfigurationError
from spark_flow.ops.admin import COMMANDS
from spark_flow.ops.view import HomeView, QueueView
from spark_flow.ops.why import explain
from spark_flow.records.status import control_table
from spark_flow.rules.depth import Depth
from spark_flow.store.table import sql_string

if TYPE_CHECKING:
    from spark_flow.ops.admin import FlowAdmin, Issued
    from spark_flow.records.commands import Issuer

#: How far back a chart reaches into the controller's samples.
CHART_WINDOW = timedelta(minutes=15)


def unix_time(moment: datetime | None) -> float | None:
    return moment.timestamp() if moment is not None else None


def depth_json(depth: Depth) -> dict[str, int]:
    return {"count": depth.count, "size": depth.size}


def queue_json(queue: QueueView, causes: Mapping[str, list[str]]) -> dict[str, Any]:
    """One queue as the page shows it."""
    settings = queue.settings
    return {
        "name": queue.name, "error": queue.error, "held": queue.held, "held_since": unix_time(queue.held_since),
        "producers_stopped": queue.producers_stopped, "home_stopped": queue.home_stopped,
        "depth": depth_json(queue.depth), "thresholds": asdict(queue.thresholds), "latest": queue.latest,
        "max_count": settings.max_count if settings else 0, "max_size": settings.max_size if settings else 0,
        "policy": settings.policy if settings else None, "root_cause": causes.get(queue.name, []),
        "subscriptions": [{
            "name": s.name, "depth": depth_json(s.depth), "age": round(s.age, 3), "flow_stopped": s.flow_stopped,
            "flow_stopped_count": s.flow_stopped_count, "last_transition": unix_time(s.last_transition),
            "stalled": s.stalled, "backpressured": s.backpressured, "downstream": list(s.downstream),
            "acked_at": unix_time(s.acked_at), "discarded_count": s.discarded_count,
            "expired_count": s.expired_count, "dead_lettered_count": s.dead_lettered_count, "position": s.position,
            "drain_rate": s.drain_rate, "admitted_rate": None if s.pace is None else s.pace.rate,
            "pacing_producers": None if s.pace is None else s.pace.producers,
        } for s in queue.subscriptions],
    }


def why(view: HomeView, queue: str) -> list[dict[str, Any]]:
    """``spark-flow why QUEUE``'s stages, for the page."""
    return [{**asdict(stage), "line": stage.line()} for stage in explain(view, queue)]


def chart(admin: FlowAdmin, view: HomeView, queue: str, subscription: str | None = None) -> dict[str, Any]:
    """A subscription's depth over the last minutes (its ``default`` one, else its first, when
    none is named): the controller's samples, the depth at each of its flow transitions, and
    now; the thresholds at each point; the intervals its producers were held (flow-stopped, or
    stopped by an operator, as sampled)."""
    looked = view.queues.get(queue)
    if looked is None or looked.settings is None:
        readable = [n for n, q in view.queues.items() if q.error is None]
        raise ConfigurationError("queue", queue, f"a readable queue of {view.home} ({len(readable)}): "
                                                 f"{', '.join(readable[:10])}{', ...' if len(readable) > 10 else ''}")
    if subscription is None:
        names = [s.name for s in looked.subscriptions]
        subscription = "default" if "default" in names or not names else names[0]
    sub = next((s for s in looked.subscriptions if s.name == subscription), None)
    if sub is None:
        raise ConfigurationError("subscription", subscription,
                                 f"a subscription of queue {queue!r}: {', '.join(s.name for s in looked.subscriptions)}")
    since = view.at - CHART_WINDOW
    points = _samples(admin, queue, subscription, since)
    for row in admin.queue(queue).history.read():
        if row["subscription"] == subscription and row["time"] >= since:
            points.append({"t": row["time"].timestamp(), "depth": row["depth_count"], "stop": row["stop_count"],
                           "resume": row["resume_count"], "held": bool(row["flow_stopped"]), "from": "transition"})
    t = looked.thresholds
    points.append({"t": view.at.timestamp(), "depth": sub.depth.count, "stop": t.stop_count,
                   "resume": t.resume_count, "held": looked.held, "from": "now"})
    points.sort(key=lambda p: p["t"])
    return {"queue": queue, "subscription": subscription, "points": points, "held": _intervals(points)}


def _samples(admin: FlowAdmin, queue: str, subscription: str, since: datetime) -> list[dict[str, Any]]:
    """The controller's samples of one subscription since ``since``, read with a filter (its
    history table keeps a sample per subscription and controller batch)."""
    micros = int(since.timestamp() * 1_000_000)
    rows = control_table(admin.home, "history", admin.storage_options).rows(
        ["time", "depth_count", "stop_count", "resume_count", "flow_stopped", "producers_stopped"],
        where=f"event = 'sample' AND queue = {sql_string(queue)} AND subscription = {sql_string(subscription)} "
              f"AND CAST(time AS BIGINT) >= {micros}")
    return [{"t": r["time"].timestamp(), "depth": r["depth_count"], "stop": r["stop_count"], "resume": r["resume_count"],
             "held": bool(r["flow_stopped"] or r["producers_stopped"]), "from": "controller"} for r in rows]


def _intervals(points: list[dict[str, Any]]) -> list[list[float]]:
    """The [start, end] intervals in which the points say producers were held."""
    found, start = [], None
    for point in points:
        if point["held"] and start is None:
            start = point["t"]
        elif not point["held"] and start is not None:
            found.append([start, point["t"]])
            start = None
    if start is not None:
        found.append([start, points[-1]["t"]])
    return found


def read_request(body: bytes) -> dict[str, Any]:
    """An action's body as a JSON object, or a :class:`ConfigurationError` naming what is wrong
    with it (not UTF-8, not JSON, nested deeper than an action is, not an object)."""
    import json

    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigurationError("request", f"byte {error.start}", "a JSON object in UTF-8: the request is not UTF-8") from None
    if _nesting(text) > MAX_NESTING:
        raise ConfigurationError("request", f"{_nesting(text)} levels", f"a JSON object nested at most {MAX_NESTING} "
                                                                      "levels: the request is nested too deeply")
    try:
        request = json.loads(text or "{}")
    except json.JSONDecodeError as error:
        raise ConfigurationError("request", f"{error.msg} at character {error.pos}",
                                 "a JSON object: the request is not JSON") from None
    if not isinstance(request, dict):
        raise ConfigurationError("request", type(request).__name__, "a JSON object")
    return request


#: How deep an action's JSON may nest (``{"settings": {...}}`` is two levels).
MAX_NESTING = 4


def _nesting(text: str) -> int:
    """How deep ``[`` and ``{`` nest in ``text`` (brackets in strings count too: a bound, not a
    parse; the parser's recursion never sees a deeper body)."""
    deepest = level = 0
    for char in text:
        if char in "[{":
            level += 1
            deepest = max(deepest, level)
        elif char in "]}":
            level -= 1
    return deepest


def act(admin: FlowAdmin, request: Mapping[str, Any], issuer: Issuer) -> Issued:
    """Issue the operator's action ``request`` (``{"action": "stop-producers", "target":
    "events"}``; ``set`` takes ``settings`` {key: value}, ``unset`` ``keys`` [key]) as ``issuer``.
    Checked as the CLI checks it: a bad one raises, naming what was wrong, and nothing is written."""
    action, target = request.get("action"), request.get("target")
    if not isinstance(action, str) or action not in COMMANDS:
        raise ConfigurationError("action", action, ", ".join(COMMANDS))
    if not isinstance(target, str) or not target:
        raise ConfigurationError("target", target, "a queue name or pattern")
    changes: dict[str, str | None] = {}
    if action == "set":
        settings = request.get("settings")
        if not isinstance(settings, Mapping) or not settings:
            raise ConfigurationError("settings", settings, "at least one setting and its value, e.g. {\"stopCount\": 900}")
        changes = {str(key): _value(str(key), value) for key, value in settings.items()}
    elif action == "unset":
        keys = request.get("keys")
        if not isinstance(keys, list) or not keys or not all(isinstance(k, str) for k in keys):
            raise ConfigurationError("keys", keys, "a list of settings to remove, e.g. [\"stopCount\"]")
        changes = dict.fromkeys(keys)
    return admin.issue(action, target, changes, issuer)


def _value(key: str, value: Any) -> str:
    """A setting's value as the command line gives it: a JSON string or number (a boolean as
    ``true``/``false``)."""
    if isinstance(value, bool):
        return str(value).lower()
    if not isinstance(value, str | int | float):
        raise ConfigurationError(key, value, "a string or a number")
    return str(value)
