"""``spark-flow serve``: one process, no Spark, serving a home's Prometheus metrics at
``/metrics`` and its console at ``/`` (:mod:`spark_flow.console.api`): a scrape reads the home at
that moment, a console page gets the newest look, paced (:mod:`spark_flow.console.looker`).

Who may act. Bound to loopback (the default), the console is for the machine's own users: its
``Host`` header must be a loopback name literally, with the port (never resolved), which keeps
a web page's DNS rebinding from reaching it. Bound elsewhere, actions need a token (``--token-file`` or ``$SPARK_FLOW_TOKEN``,
sent as ``Authorization: Bearer``), unless the console is ``--read-only`` (it has no action at
all). Every action must also carry the page's CSRF token in a header, as JSON, from the page's
own origin: a form or script on another site can send none of these. No storage option, token
or other secret appears in a page, a metric or a log line.
"""

from __future__ import annotations

import errno
import hmac
import html
import ipaddress
import json
import logging
import secrets
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any
from urllib.parse import parse_qs, urlsplit

from spark_flow.console.api import act, chart, read_request, why
from spark_flow.console.listing import list_query
from spark_flow.console.looker import Looker
from spark_flow.console.overview import Overview
from spark_flow.exceptions import ConfigurationError, SparkFlowError, StorageAccessError, one_line
from spark_flow.ops.admin import FlowAdmin
from spark_flow.ops.metrics import CONTENT_TYPE, exposition, reading, unreadable
from spark_flow.records.commands import Issuer

log = logging.getLogger("spark_flow.console.serve")

DEFAULT_PORT = 9108  # next to the node exporter's 9100 block, as exporters choose theirs
DEFAULT_BIND = "127.0.0.1"
TOKEN_ENV = "SPARK_FLOW_TOKEN"
#: The header an action may name its issuer in (an authenticating proxy's, a script's).
USER_HEADER = "X-Spark-Flow-User"
MIN_TOKEN = 16
#: The header a Prometheus scrape says its timeout in (seconds).
SCRAPE_TIMEOUT_HEADER = "X-Prometheus-Scrape-Timeout-Seconds"
#: How long a scrape that sends no timeout may wait for a look: within Prometheus' default 10 s.
SCRAPE_BUDGET = 9.0
STATIC = {"console.js": "text/javascript; charset=utf-8", "console.css": "text/css; charset=utf-8"}
HEADERS = {
    "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'none'",
}


@dataclass(frozen=True)
class ServeOptions:
    """How ``spark-flow serve`` runs, checked when made (:func:`serve_options`)."""

    home: str
    port: int = DEFAULT_PORT
    bind: str = DEFAULT_BIND
    read_only: bool = False
    token: str | None = field(default=None, repr=False)
    storage_options: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def loopback(self) -> bool:
        return is_loopback(self.bind)


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or an address) is this machine's loopback only."""
    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)


def serve_options(home: str, port: Any = DEFAULT_PORT, bind: str = DEFAULT_BIND, *, read_only: bool = False,
                  token: str | None = None, storage_options: Mapping[str, str] | None = None) -> ServeOptions:
    """Check how to serve: a port 0-65535 (0: any free one), an address to bind, and a token of
    at least 16 characters when actions are served on an address other than loopback."""
    text = str(port).strip()
    if isinstance(port, bool) or not text.isdigit() or int(text) > 65535:
        raise ConfigurationError("--port", port, "a port number from 0 to 65535 (0: any free port)")
    if not bind or not isinstance(bind, str):
        raise ConfigurationError("--bind", bind, "an address or host name of this machine, e.g. 127.0.0.1")
    if token is not None and (len(token) < MIN_TOKEN or any(c.isspace() for c in token)):
        raise ConfigurationError("token", "***", f"a token of at least {MIN_TOKEN} characters and no spaces "
                                                 "(e.g. from: python -c 'import secrets; print(secrets.token_urlsafe())')")
    options = ServeOptions(home, int(text), bind, read_only, token, dict(storage_options or {}))
    if not options.loopback and not read_only and token is None:
        raise ConfigurationError("--bind", bind, "a loopback address (127.0.0.1, ::1, localhost), unless actions "
                                                 f"need a token: give --token-file or ${TOKEN_ENV}, or serve --read-only")
    return options


class FlowServer(ThreadingHTTPServer):
    """The HTTP server of ``spark-flow serve``."""

    daemon_threads = True

    def __init__(self, options: ServeOptions) -> None:
        self.options = options
        self.csrf = secrets.token_urlsafe(32)
        self.looker = Looker(options.home, options.storage_options)
        self.admin = FlowAdmin(options.home, options.storage_options)
        self._overview: Overview | None = None
        self.address_family = socket.AF_INET6 if ":" in options.bind else socket.AF_INET
        try:
            super().__init__((options.bind, options.port), _Handler)
        except OSError as error:
            in_use = error.errno == errno.EADDRINUSE
            raise ConfigurationError("--port" if in_use else "--bind", options.port if in_use else options.bind,
                                     f"a free port on an address of this machine ({error.strerror})") from None

    def overview(self) -> Overview:
        """The console's answers of the newest look (:meth:`Looker.recent`; during serve's first,
        the controller's last), made once per look."""
        _, view, _ = self.looker.recent(status=True)
        kept = self._overview
        if kept is None or kept.view is not view:
            kept = self._overview = Overview(view, read_only=self.options.read_only)
        return kept

    @property
    def url(self) -> str:
        host = self.options.bind if ":" not in self.options.bind else f"[{self.options.bind}]"
        return f"http://{host}:{self.server_address[1]}/"

    def allowed_host(self, host: str | None) -> bool:
        """Whether a request's ``Host`` names this server: on loopback, only a literal loopback
        name with this server's port (``127.0.0.1``, ``[::1]``, ``localhost``, the bound address).
        A name is never resolved: a page on a name of the attacker's that resolves to loopback
        (DNS rebinding) is refused."""
        if not self.options.loopback:
            return True
        port = self.server_address[1]
        given = (host or "").strip().lower()
        names = {"127.0.0.1", "localhost", "[::1]", _literal(self.options.bind)}
        return given in {f"{name}:{port}" for name in names} | (names if port == 80 else set())

    def same_origin(self, origin: str | None, host: str | None) -> bool:
        """Whether an action's ``Origin`` (when sent) is this console's page: ``http://`` and the
        very ``Host`` it was allowed by."""
        return origin is None or (origin.strip().lower() == f"http://{(host or '').strip().lower()}"
                                  and self.allowed_host(host))


def _literal(bind: str) -> str:
    """The bound address as a ``Host`` header names it (an IPv6 address in brackets)."""
    bind = bind.lower()
    return f"[{bind}]" if ":" in bind else bind


class _Handler(BaseHTTPRequestHandler):
    server: FlowServer
    _head_only = False  # a HEAD request: headers as GET's, no body
    server_version = "spark-flow"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def _send(self, status: int, body: bytes, content_type: str, headers: Mapping[str, str] | None = None) -> None:
        self.send_response(status)
        for key, value in {**HEADERS, "Content-Type": content_type, "Content-Length": str(len(body)),
                           **(headers or {})}.items():
            self.send_header(key, value)
        self.end_headers()
        if not self._head_only:
            self.wfile.write(body)

    def _json(self, status: int, value: Any) -> None:
        self._send(status, json.dumps(value).encode(), "application/json")

    def do_GET(self) -> None:
        if not self.server.allowed_host(self.headers.get("Host")):
            return self._json(HTTPStatus.FORBIDDEN, {"error": "Host is not this server's loopback address"})
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query).items()}
        try:
            if url.path == "/metrics":
                return self._metrics()
            if url.path in ("/", "/index.html"):
                return self._send(self._home_status(), self._page(), "text/html; charset=utf-8")
            if url.path.startswith("/static/") and url.path[8:] in STATIC:
                return self._send(HTTPStatus.OK, _static(url.path[8:]).encode(), STATIC[url.path[8:]])
            if url.path == "/api/overview":
                answer = self.server.overview().answer(list_query(query), query.get("selected"), query.get("seen", ""))
                return self._json(HTTPStatus.OK, {**answer, "token_needed": self._token_needed()})
            if url.path == "/api/chart":
                _, view, _ = self.server.looker.recent()
                with self.server.looker.lock:
                    answer = chart(self.server.admin, view, query.get("queue", ""), query.get("subscription"))
                return self._json(HTTPStatus.OK, answer)
            if url.path == "/api/why":
                _, view, _ = self.server.looker.recent()
                return self._json(HTTPStatus.OK, why(view, query.get("queue", "")))
        except StorageAccessError as error:  # storage unreachable, or refused, named
            return self._unavailable(error)
        except SparkFlowError as error:
            return self._json(HTTPStatus.BAD_REQUEST, {"error": str(error)})
        except Exception as error:  # storage unreachable, or refused: one line, as the CLI says it
            return self._unavailable(error)
        return self._json(HTTPStatus.NOT_FOUND, {"error": f"no such page: {url.path}"})

    def do_HEAD(self) -> None:
        """As GET, without the body (a load balancer's or an uptime check's request)."""
        self._head_only = True
        self.do_GET()

    def _metrics(self) -> None:
        """The home's metrics within the scrape's timeout (Prometheus sends it); a home that cannot
        be read is ``spark_flow_home_up 0`` (200: this server is up, Prometheus' ``up`` says so;
        its storage is not), logged as a 503 is; a first look still under way at the timeout,
        only how long it has taken so far."""
        began = time.monotonic()
        try:
            looked = self.server.looker.for_scrape(_budget(self.headers.get(SCRAPE_TIMEOUT_HEADER)))
        except Exception as error:
            log.warning("cannot read %s: %s", self.server.options.home, one_line(error))
            return self._send(HTTPStatus.OK, unreadable(self.server.options.home, time.monotonic() - began), CONTENT_TYPE)
        if looked is None:
            return self._send(HTTPStatus.OK, reading(self.server.options.home, time.monotonic() - began), CONTENT_TYPE)
        return self._send(HTTPStatus.OK, exposition(*looked), CONTENT_TYPE)

    def _home_status(self) -> int:
        """The page's status: 503 while the home cannot be read (the page says why), else 200."""
        try:
            self.server.looker.recent(status=True)
        except Exception:
            return HTTPStatus.SERVICE_UNAVAILABLE
        return HTTPStatus.OK

    def _unavailable(self, error: Exception) -> None:
        """The home cannot be read now: 503 (a health check sees it), and a log line."""
        message = f"cannot read {self.server.options.home}: {one_line(error)}"
        log.warning("%s", message)
        return self._json(HTTPStatus.SERVICE_UNAVAILABLE, {"error": message})

    def do_POST(self) -> None:
        refused = self._refusal()
        if refused is not None:
            return self._json(*refused)
        length = self.headers.get("Content-Length") or "0"
        if not length.isdigit() or int(length) > 65536:
            return self._json(HTTPStatus.BAD_REQUEST, {"error": "an action is a JSON object of at most 64 KiB"})
        issuer = self._issuer()
        try:
            request = read_request(self.rfile.read(int(length)))  # a malformed one is refused before storage is
            with self.server.looker.lock:
                issued = act(self.server.admin, request, issuer)
        except StorageAccessError as error:
            return self._unavailable(error)
        except SparkFlowError as error:
            return self._json(HTTPStatus.BAD_REQUEST, {"error": str(error)})
        except Exception as error:  # a well-formed action that storage failed: one line, as the CLI says it
            return self._unavailable(error)
        log.info("console action by %s: %s", issuer, issued.message)
        return self._json(HTTPStatus.OK, {"command": issued.id, "message": issued.message,
                                          "applied": list(issued.applied), "pending": dict(issued.pending)})

    def _issuer(self) -> Issuer:
        """Who acts (the ``X-Spark-Flow-User`` a proxy or script names, else the token's holder
        or this machine's user at loopback, as claimed: the address is the fact), from where,
        through the console."""
        named = (self.headers.get(USER_HEADER) or "").strip()
        if not named.isprintable() or len(named) > 64:
            named = ""
        who = named or ("token" if self._token_needed() else "loopback")
        return Issuer(who, self.client_address[0], "console")

    def _refusal(self) -> tuple[int, dict[str, str]] | None:
        """Why an action is refused, None if it is not: the console is read-only, the request
        does not name this server or come from its page, or it lacks the token."""
        if urlsplit(self.path).path != "/api/action":
            return HTTPStatus.NOT_FOUND, {"error": f"no such action: {self.path}"}
        if self.server.options.read_only:
            return HTTPStatus.FORBIDDEN, {"error": "this console is read-only (spark-flow serve --read-only)"}
        host = self.headers.get("Host")
        if not self.server.allowed_host(host):
            return HTTPStatus.FORBIDDEN, {"error": "Host is not this server's loopback address"}
        if not self.server.same_origin(self.headers.get("Origin"), host):
            return HTTPStatus.FORBIDDEN, {"error": "a cross-site request: Origin is not this console"}
        if (self.headers.get("Content-Type") or "").split(";")[0].strip() != "application/json":
            return HTTPStatus.FORBIDDEN, {"error": "an action is JSON (Content-Type: application/json)"}
        if not hmac.compare_digest(self.headers.get("X-CSRF-Token") or "", self.server.csrf):
            return HTTPStatus.FORBIDDEN, {"error": "a cross-site request: the page's CSRF token is missing or wrong"}
        if self._token_needed():
            given = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
            if not hmac.compare_digest(given.encode(), (self.server.options.token or "").encode()):
                return HTTPStatus.UNAUTHORIZED, {"error": "an action needs this console's token"}
        return None

    def _token_needed(self) -> bool:
        return self.server.options.token is not None and not self.server.options.read_only

    def _page(self) -> bytes:
        options = self.server.options
        page = _static("console.html")
        while options.read_only and "<!--actions-->" in page:  # no action, no dialog: the markup is not there
            start, end = page.index("<!--actions-->"), page.index("<!--/actions-->")
            page = page[:start] + page[end + len("<!--/actions-->"):]
        for key, value in {"home": options.home, "csrf": self.server.csrf, "read_only": str(options.read_only).lower(),
                           "token_needed": str(self._token_needed()).lower()}.items():
            page = page.replace("{{" + key + "}}", html.escape(value))
        return page.encode()


def _budget(timeout: str | None) -> float:
    """How long a scrape may wait for a look: its timeout (Prometheus' header) less a second for
    the answer, :data:`SCRAPE_BUDGET` if it sends none."""
    try:
        return max(0.5, float(timeout or "") - 1.0)
    except ValueError:
        return SCRAPE_BUDGET


def _static(name: str) -> str:
    return resources.files("spark_flow.console").joinpath("static", name).read_text(encoding="utf-8")


def log_to_stderr() -> None:
    """Log spark-flow's INFO lines (each console action with its issuer, a home that cannot be
    read) to stderr, times in UTC as everywhere an operator reads one: ``spark-flow serve``'s log."""
    handler = logging.StreamHandler()
    formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%SZ")
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    root = logging.getLogger("spark_flow")
    root.addHandler(handler)
    root.setLevel(logging.INFO)


def serve(options: ServeOptions, ready: Any = None) -> None:
    """Serve until interrupted (Ctrl-C, SIGTERM); ``ready(server)`` is called once listening."""
    import signal

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    server = FlowServer(options)
    server.looker.start()  # the first page and scrape find the home's tables open
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, interrupt)
    if ready is not None:
        ready(server)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
