"""``spark-flow serve`` as a command: its token (``--token-file`` or ``$SPARK_FLOW_TOKEN``), its
storage options kept off its command line, its log on stderr and the line it prints when ready."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spark_flow.console.serve import TOKEN_ENV, log_to_stderr, serve, serve_options
from spark_flow.exceptions import ConfigurationError, one_line
from spark_flow.ops.admin import FlowAdmin


def serve_command(admin: FlowAdmin, *, port: str, bind: str, read_only: bool, token_file: str | None) -> None:
    """Run ``spark-flow serve`` for ``admin``'s home until interrupted (the CLI's options)."""
    admin = _storage_options_off_the_command_line(admin)
    token = os.environ.get(TOKEN_ENV) or None
    if token_file:
        try:
            token = Path(token_file).read_text().strip()
        except OSError as error:
            raise ConfigurationError("--token-file", token_file, f"a readable file holding the token ({error.strerror})") from None
    options = serve_options(admin.home, port, bind, read_only=read_only, token=token, storage_options=admin.storage_options)

    def ready(server: Any) -> None:
        mode = ", read-only" if options.read_only else ", actions need a token" if options.token else ""
        try:
            empty = "" if admin.queues() else " (no queue registered yet)"
        except Exception as error:  # storage unreachable: served, and said (spark_flow_home_up 0, 503 on /)
            empty = f" (cannot read it now: {one_line(error)}; serving, and /metrics says spark_flow_home_up 0)"
        print(f"spark-flow serve: {server.url} (the console{mode}; Prometheus metrics at /metrics) for home "
              f"{admin.home}{empty}", flush=True)

    log_to_stderr()
    serve(options, ready)


#: The environment variable naming the pipe a re-executed ``serve`` reads its storage options from.
OPTIONS_FD_ENV = "SPARK_FLOW_SERVE_OPTIONS_FD"


def _storage_options_off_the_command_line(admin: FlowAdmin) -> FlowAdmin:
    """``serve`` runs for weeks: storage options given with ``--storage-option`` (keys, SAS
    tokens) would be in its command line, which ``ps`` shows every user, all that time. So it
    executes itself again (the same process id) without them, handing them over through a pipe
    the new program reads once; the environment carries only the pipe's number. A
    ``--properties-file`` keeps them off the command line from the start."""
    handed = os.environ.pop(OPTIONS_FD_ENV, None)
    if handed is not None:  # the program executed again: the options come through the pipe
        with os.fdopen(int(handed), "rb") as pipe:
            return FlowAdmin(admin.home, {**admin.storage_options, **json.loads(pipe.read())}, issuer=admin.issuer)
    argv = _without_storage_options(sys.argv)
    if argv == sys.argv or not Path(sys.argv[0]).is_file():  # none on this process's command line
        return admin
    read, write = os.pipe()
    os.write(write, json.dumps(admin.storage_options).encode())  # a few KiB at most: the pipe holds them
    os.close(write)
    os.set_inheritable(read, True)
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, *argv], {**os.environ, OPTIONS_FD_ENV: str(read)})


def _without_storage_options(argv: Sequence[str]) -> list[str]:
    """``argv`` without its ``--storage-option`` values (``--storage-option K=V``,
    ``--storage-option=K=V`` and argparse's abbreviations of the option)."""
    kept, skip = [], False
    for word in argv:
        name = word.split("=", 1)[0]
        if skip:
            skip = False
        elif len(name) >= 4 and "--storage-option".startswith(name):
            skip = "=" not in word
        else:
            kept.append(word)
    return kept
