"""``spark-flow``: the operator's command line over a home (``--home`` or ``$SPARK_FLOW_HOME``).

Only ``declare`` and ``doctor`` start Spark; the other commands read and append the home's Delta tables with
``deltalake``, so they answer in a second. On object storage they take the storage settings a
Spark job has (``--properties-file``, the ``spark.hadoop.fs.s3a.*`` / ``fs.azure.*`` /
``spark.flow.storage.*`` entries of a spark-defaults.conf) and ``--storage-option KEY=VALUE``.
With ``--remote sc://host:port`` (or ``$SPARK_REMOTE``), as PySpark takes it, every command works
through that Spark Connect session instead, with the engine's credentials alone (governed compute:
``spark.flow.io=engine``, unless the properties file or the options set it). Commands that change something (``set``,
``unset``, ``stop-producers``, ``start-producers``) are checked, appended to the commands table with their
issuer and applied at once (what cannot be, a controller applies; the answer says which); ``set-home`` / ``unset-home`` (the home-wide limits) are recorded with the
home at once; ``delete`` removes a queue at once (its producers and consumers fail at their next look).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spark_flow.console.serve import DEFAULT_BIND, DEFAULT_PORT, TOKEN_ENV
from spark_flow.exceptions import (
    ConfigurationError,
    EngineUnreachableError,
    SparkFlowError,
    StorageAccessError,
    one_line,
)
from spark_flow.ops.admin import FlowAdmin
from spark_flow.records.commands import ALL_QUEUES, Issuer
from spark_flow.records.home import HOME_CONF
from spark_flow.rules.storage_options import IO_OPTION, as_conf, storage_options
from spark_flow.store.access import access_error

HOME_ENV = "SPARK_FLOW_HOME"
REMOTE_ENV = "SPARK_REMOTE"

STATUS_COLUMNS = (
    ("queue", "queue"), ("subscription", "subscription"), ("depth_count", "depth"), ("depth_size", "bytes"),
    ("stop_count", "stop"), ("resume_count", "resume"), ("stop_size", "stopSize"), ("resume_size", "resumeSize"),
    ("stop_age", "stopAge(s)"), ("resume_age", "resumeAge(s)"),
    ("flow_stopped", "flowStopped"), ("flow_stopped_count", "flowStoppedCount"),
    ("producers_held", "held"), ("held_since", "heldSince"), ("consumer_stalled", "stalled"),
    ("oldest_message_age_seconds", "oldestAge(s)"), ("discarded_count", "discarded"), ("expired_count", "expired"),
    ("dead_lettered_count", "deadLettered"), ("drain_rate", "drain/s"), ("admitted_rate", "paced/s"),
    ("last_transition", "lastTransition"),
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="spark-flow", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="examples:\n"
               "  spark-flow --home /data/flow status\n"
               "  spark-flow declare /data/queues/events --schema 'id BIGINT, body STRING' --set stopCount=900\n"
               "  spark-flow set events stopCount=900 resumeCount=500\n"
               "  spark-flow set events stopAge=5min resumeAge=1min   # the oldest message's age\n"
               "  spark-flow unset events stopCount resumeCount   # back to the queue's table properties\n"
               "  spark-flow set-home homeStopCount=100000   # every producer held while the home's queues hold more\n"
               "  spark-flow stop-producers 'events.>'      # a pattern; no target: every queue\n"
               "  spark-flow plot events --out events.png\n"
               "  spark-flow replay-dead-letters events   # its poison messages back, once the consumer is fixed\n"
               "  spark-flow delete events --if-empty --if-unused   # refused while it has messages or consumers\n"
               "  spark-flow why events                     # the stage that holds its producers\n"
               "  spark-flow serve --port 9108              # Prometheus /metrics and the console at /\n"
               "  spark-flow doctor events                  # this deployment checked as spark-flow uses it\n"
               "  spark-flow doctor --master yarn --conf spark.pyspark.python=/opt/venv/bin/python\n"
               "  spark-flow --home s3a://bucket/flow --properties-file conf/object-storage.conf status\n"
               "  spark-flow --remote sc://host:15002 --home s3a://bucket/flow status   # through the engine alone")
    parser.add_argument("--home", default=os.environ.get(HOME_ENV),
                        help=f"the control plane's location ({HOME_CONF}); default ${HOME_ENV}")
    parser.add_argument("--remote", default=os.environ.get(REMOTE_ENV), metavar="sc://HOST:PORT",
                        help=f"a Spark Connect server, as PySpark's --remote (default ${REMOTE_ENV}): every command "
                             "reads and writes the tables through that session, with the engine's credentials, "
                             f"{IO_OPTION}=engine unless the properties file or --storage-option sets it (auto would "
                             "take this Python's deltalake where it reaches the storage, and a path would be read "
                             "here rather than where the server is)")
    parser.add_argument("--properties-file", metavar="FILE",
                        help="a Spark properties file (spark-defaults.conf format): its object store settings "
                             "(spark.hadoop.fs.s3a.*, spark.hadoop.fs.azure.*, spark.flow.storage.*) reach deltalake")
    parser.add_argument("--storage-option", dest="storage", action="append", default=[], metavar="KEY=VALUE",
                        help="a deltalake storage option (aws_endpoint_url=http://..., azure_storage_account_key=...); "
                             "repeatable, wins over the properties file")
    commands = parser.add_subparsers(dest="command", required=True, metavar="command")

    status = commands.add_parser("status", help="depth, thresholds and flow state of every queue and subscription")
    status.add_argument("target", nargs="?", help="a queue name or pattern (default: all)")

    declare = commands.add_parser("declare", help="create a queue (a Delta table) and register it (starts Spark)")
    declare.add_argument("queue", help="a path or a catalog table name")
    declare.add_argument("--schema", help="the messages' columns as DDL, e.g. 'id BIGINT, body STRING'")
    declare.add_argument("--set", dest="settings", nargs="*", default=[], metavar="KEY=VALUE",
                         help="limits and policy stored as flow.* table properties (stopCount=900 maxSize=1g)")

    set_ = commands.add_parser("set", help="change settings of queues at run time (in force from producers' next look)")
    set_.add_argument("target", help="a queue name or pattern")
    set_.add_argument("settings", nargs="+", metavar="KEY=VALUE", help="stopCount=900 resumeSize=8m policy=ring")

    unset = commands.add_parser("unset", help="remove run-time settings: back to the queue's recorded value or default")
    unset.add_argument("target", help="a queue name or pattern")
    unset.add_argument("keys", nargs="+", metavar="KEY", help="stopCount resumeCount")

    set_home = commands.add_parser("set-home", help="change the home-wide limits on the total depth of its queues")
    set_home.add_argument("settings", nargs="+", metavar="KEY=VALUE", help="homeStopCount=100000 homeResumeSize=1g")
    unset_home = commands.add_parser("unset-home", help="remove home-wide limits")
    unset_home.add_argument("keys", nargs="+", metavar="KEY", help="homeStopCount homeResumeCount")

    for name, what in (("stop-producers", "hold every producer of the queues, whatever their depth"),
                       ("start-producers", "undo stop-producers: the thresholds decide again")):
        command = commands.add_parser(name, help=what)
        command.add_argument("target", nargs="?", default=ALL_QUEUES, help="a queue name or pattern (default: all)")

    subscriptions = commands.add_parser("subscriptions", help="a queue's subscriptions: ack positions, flow state")
    subscriptions.add_argument("queue")

    commands.add_parser("commands", help="the operator commands issued so far, in the order applied")

    replay = commands.add_parser("replay-dead-letters",
                                 help="append a queue's dead letters not replayed yet back into the queue, once")
    replay.add_argument("queue")
    delete = commands.add_parser("delete", help="delete a queue: its table, state and registration (a queue "
                                                "by catalog name through the engine, with --remote; a catalog "
                                                "table declared by path: DROP TABLE it in Spark first)")
    delete.add_argument("queue", help="a registered queue's name")
    delete.add_argument("--if-empty", action="store_true",
                        help="refuse while a subscription has messages it has not acknowledged")
    delete.add_argument("--if-unused", action="store_true", help="refuse while a live query reads the queue")
    why = commands.add_parser("why", help="why a queue holds its producers: each stage down to the root cause")
    why.add_argument("queue")

    serve = commands.add_parser("serve", help="serve Prometheus metrics (/metrics) and the console (/) over HTTP")
    serve.add_argument("--port", default=str(DEFAULT_PORT), help=f"the port to listen on (default {DEFAULT_PORT}; 0: any free one)")
    serve.add_argument("--bind", default=DEFAULT_BIND, help=f"the address to listen on (default {DEFAULT_BIND}: this "
                                                            "machine only); elsewhere, actions need a token")
    serve.add_argument("--read-only", action="store_true", help="a console without actions")
    serve.add_argument("--token-file", metavar="FILE",
                       help=f"a file holding the token actions need (or ${TOKEN_ENV}); needed with --bind elsewhere")

    doctor = commands.add_parser("doctor", help="check this deployment as spark-flow uses it (starts Spark): "
                                                "versions, jars, storage from the driver and the executors, the home")
    doctor.add_argument("queues", nargs="*", metavar="QUEUE", help="queues to read too (a registered name or a path)")
    doctor.add_argument("--master", help="the cluster manager, as spark-submit's --master (yarn, spark://host:7077, "
                                         "local[2]); wins over the properties file's spark.master")
    doctor.add_argument("--conf", dest="spark_conf", action="append", default=[], metavar="KEY=VALUE",
                        help="a Spark setting, as spark-submit's --conf (repeatable; wins over the properties file)")

    plot = commands.add_parser("plot", help="PNG of depth against the thresholds over time, stopped intervals shaded")
    plot.add_argument("queue")
    plot.add_argument("--subscription", default="default")
    plot.add_argument("--out", help="the PNG to write (default: <queue>-depth.png)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; errors print one line naming what was wrong and return 2.

    Run as the ``spark-flow`` script (no ``argv``), it ends the process itself with that
    status (0 done, 1 storage or the engine failed, a ``--remote`` server not answering among them,
    or a doctor check did, 2 refused, a malformed ``--remote`` URL among them) through
    :func:`~spark_flow.spark.session.exit_process`: an interpreter that used deltalake can abort at
    exit (delta-io/delta-rs#2184), which would turn either status into 134, and scripts and
    schedulers read it; it stops a Spark Connect session first and ends even where a Connect
    client's threads would hold it (SPARK-NOTES 17).
    """
    if argv is not None:
        return _main(argv)
    from spark_flow.spark.session import exit_process

    try:
        status = _main(None)
    except SystemExit as done:  # --help, or a usage error argparse reported
        status = done.code if isinstance(done.code, int) else 2
    exit_process(status)


def _main(argv: Sequence[str] | None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        if not args.home:
            raise ConfigurationError("--home", None, f"the control plane's location, or set ${HOME_ENV}")
        conf = {**read_properties(args.properties_file), **as_conf(_pairs(args.storage, secret=True))}
        if args.command == "doctor":
            conf.update({**_pairs(args.spark_conf, secret=True), **({"spark.master": args.master} if args.master else {})})
        if args.remote:
            _connect(args, conf)
        if args.command == "doctor":
            return _doctor(args.home, args.queues, conf)
        _run(FlowAdmin(args.home, storage_options(conf), issuer=Issuer.this_process("cli")), args, conf)
    except (StorageAccessError, EngineUnreachableError) as error:
        print(f"spark-flow {args.command}: error: {error}", file=sys.stderr)
        return 1
    except SparkFlowError as error:
        print(f"spark-flow {args.command}: error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # storage refused or unreachable: named when it says what is missing
        named = access_error(args.home, storage_options(conf), error)
        print(f"spark-flow {args.command}: error: {named or f'cannot read {args.home}: {one_line(error)}'}",
              file=sys.stderr)
        return 1
    except Exception as error:  # the engine's (a Spark Connect server's) failure: its first line, no stack
        if not any(kind.__module__.startswith(("pyspark.", "py4j.")) for kind in type(error).__mro__):
            raise
        print(f"spark-flow {args.command}: error: the engine failed: {_engine_said(error)}", file=sys.stderr)
        return 1
    return 0


def _connect(args: argparse.Namespace, conf: dict[str, str]) -> None:
    """The Spark Connect session ``--remote`` names, made this process's engine (every table read
    through it: :func:`~spark_flow.store.io.attach`), ``spark.flow.io=engine`` unless set."""
    from spark_flow.spark.session import remote_session
    from spark_flow.store.io import attach

    key = "--remote" if args.remote != os.environ.get(REMOTE_ENV) else f"${REMOTE_ENV}"
    if args.command == "doctor" and args.master:
        raise ConfigurationError("--master", args.master, f"no --master with {key}: the Spark Connect server has its own")
    conf.setdefault(IO_OPTION, "engine")
    storage_options(conf)  # a bad spark.flow.io or storage setting is refused before the server is asked
    attach(remote_session(args.remote, {**conf, HOME_CONF: args.home}, key=key))


def _engine_said(error: BaseException) -> str:
    """A Spark error as one line, without the JVM's stack and causes (a Connect server's
    ``JVM stacktrace``, py4j's ``at ...`` lines)."""
    text = re.split(r"\nJVM stacktrace:|\n\s*at |\nCaused by:", str(error), maxsplit=1)[0]
    return one_line(Exception(text))[:400]


def read_properties(path: str | None) -> dict[str, str]:
    """The entries of a Spark properties file (``key value`` or ``key=value`` lines, ``#``
    comments), as ``spark-submit --properties-file`` reads it."""
    if path is None:
        return {}
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as error:
        raise ConfigurationError("--properties-file", path, f"a readable Spark properties file ({error.strerror})") from None
    entries = {}
    for line in (raw.strip() for raw in lines):
        if line and not line.startswith(("#", "!")):
            match = re.match(r"(\S+?)(?:\s*[=:]\s*|\s+)(.*)$", line)
            key, value = match.groups() if match else (line, "")
            entries[key] = value.strip()
    return entries


def _run(admin: FlowAdmin, args: argparse.Namespace, conf: dict[str, str]) -> None:
    if args.command == "status":
        _print_table(admin.status(args.target).to_dict("records"), STATUS_COLUMNS)
    elif args.command == "declare":
        _declare(admin, args.queue, args.schema, _pairs(args.settings), conf)
    elif args.command == "set":
        print(admin.issue("set", args.target, _pairs(args.settings)).message)
    elif args.command == "unset":
        print(admin.issue("unset", args.target, dict.fromkeys(args.keys)).message)
    elif args.command == "set-home":
        print(f"command {admin.set_home(_pairs(args.settings))}: set-home {' '.join(args.settings)}, in force now")
    elif args.command == "unset-home":
        print(f"command {admin.unset_home(*args.keys)}: unset-home {' '.join(args.keys)}, in force now")
    elif args.command in ("stop-producers", "start-producers"):
        print(admin.issue(args.command, args.target).message)
    elif args.command == "subscriptions":
        rows = [sub.__dict__ for sub in admin.subscriptions(args.queue)]
        _print_table(rows, [(k, k) for k in ("name", "position", "index", "flow_stopped", "flow_stopped_count",
                                              "last_transition", "discarded_count", "expired_count",
                                              "dead_lettered_count", "updated_at")])
    elif args.command == "replay-dead-letters":
        print(f"queue {args.queue!r}: {admin.replay_dead_letters(args.queue)} dead letters replayed")
    elif args.command == "commands":
        rows = [{**c.__dict__, "settings": " ".join(f"{k}={v}" for k, v in c.settings.items())}
                for c in admin.commands.read()]
        _print_table(rows, [(k, k) for k in ("id", "command", "target", "settings", "issued_at", "issued_by",
                                              "issued_from", "issued_through")])
    elif args.command == "delete":
        deleted = admin.delete_queue(args.queue, if_empty=args.if_empty, if_unused=args.if_unused)
        state = f"its state at {deleted.state_location}" if deleted.state_location else "no state left"
        print(f"queue {deleted.name!r} deleted: its table at {deleted.path}, {state}, its registration in {admin.home}")
    elif args.command == "why":
        print("\n".join(admin.why(args.queue)))
    elif args.command == "serve":
        from spark_flow.console.launch import serve_command

        serve_command(admin, port=args.port, bind=args.bind, read_only=args.read_only, token_file=args.token_file)
    elif args.command == "plot":
        default = "home" if args.queue == ALL_QUEUES else args.queue
        print(admin.plot(args.queue, args.out or f"{default}-depth.png", args.subscription))


def _declare(admin: FlowAdmin, queue: str, schema: str | None, settings: dict[str, str], conf: dict[str, str]) -> None:
    from spark_flow.spark.declare import declare
    from spark_flow.spark.session import get_spark

    spark = get_spark({**conf, HOME_CONF: admin.home})
    handle = declare(spark, queue, schema, settings=settings)
    admin.registry.register(handle.name, handle.path)
    print(f"queue {handle.name!r} at {handle.path}: {handle.settings().thresholds}")


def _doctor(home: str, queues: Sequence[str], conf: dict[str, str]) -> int:
    from spark_flow.ops.doctor import report, run_checks
    from spark_flow.spark.session import get_spark, is_connect

    spark = get_spark({**conf, HOME_CONF: home})
    if not is_connect(spark):  # a Connect server's log is the server's
        spark.sparkContext.setLogLevel("ERROR")
    where = "a Spark Connect server" if is_connect(spark) else spark.conf.get("spark.master", None)
    print(f"spark-flow doctor: home {home}, Spark on {where}", flush=True)
    return report(run_checks(spark, home, queues), lambda line: print(line, flush=True))


def _pairs(items: Sequence[str], secret: bool = False) -> dict[str, str]:
    pairs = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            example = "aws_endpoint_url=http://127.0.0.1:9000" if secret else "stopCount=900"
            raise ConfigurationError("KEY=VALUE", "***" if secret else item,
                                     f"a setting and its value joined by '=', e.g. {example}")
        pairs[key.strip()] = value.strip()
    return pairs


def _print_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str]]) -> None:
    """A plain text table, one line per row, columns as wide as their widest cell."""
    cells = [[title for _, title in columns]] + [[_cell(row.get(key)) for key, _ in columns] for row in rows]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    for line in cells:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
    if not rows:
        print("(none)")


def _cell(value: Any) -> str:
    import numpy as np
    import pandas as pd

    if value is None or (not isinstance(value, str) and pd.isna(value)):
        return "-"
    if isinstance(value, (bool, np.bool_)):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:.1f}"
    if hasattr(value, "strftime"):
        from spark_flow.ops.view import iso_time

        return iso_time(value)
    return str(value)


if __name__ == "__main__":
    sys.exit(main())
