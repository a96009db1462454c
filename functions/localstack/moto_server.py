"""moto's server for the local stack, without its per-request overheads (``python -m
functions.localstack.moto_server -H 127.0.0.1 -p PORT``).

moto's own ``moto.server`` spends about a quarter of its CPU outside the AWS APIs it emulates
(py-spy over a 40 s demo run: 2,107 busy samples): for every request it lists the moto package's
directories from disk (``list_of_moto_modules`` + ``isdir``: 15 %), under a lock that every request
takes, and logs a line through ``logging`` (8 %); Flask runs in debug mode. On 2 cores the server
is the stack's busiest process (0.7 of a core at 4 frames/s of the traffic app, 75 requests/s), so
its queueing is in every hop's latency. This runs the same application (moto's
``DomainDispatcherApplication`` and request handler, threaded, as ``moto.server.main`` does) with
the module list read once, no per-request log line (errors are still logged) and debug off. If
moto's internals move, it falls back to ``moto.server.main`` unchanged.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from typing import Any

__all__ = ["main"]


def _fast_app() -> tuple[Any, Any]:
    """moto's dispatcher application and request handler with the overheads removed."""
    from functools import cache

    from moto import backends
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )

    listed = tuple(backends.list_of_moto_modules())  # the package's directories do not change
    backends.list_of_moto_modules = cache(lambda: listed)

    class QuietHandler(MotoRequestHandler):
        def log_request(self, code: Any = "-", size: Any = "-") -> None:
            return None  # one line per request costs CPU in the server every hop waits on

    app = DomainDispatcherApplication(create_backend_app)
    app.debug = False  # type: ignore[attr-defined]
    return app, QuietHandler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m functions.localstack.moto_server")
    parser.add_argument("-H", "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("-p", "--port", type=int, required=True, help="port to listen on")
    args = parser.parse_args(argv)
    try:
        app, handler = _fast_app()
    except (ImportError, AttributeError) as exc:  # moto's layout changed: its own server, as is
        print(f"moto internals not as expected ({exc}); running moto.server", file=sys.stderr)
        from moto.server import main as moto_main

        moto_main(["-H", args.host, "-p", str(args.port)])
        return
    from werkzeug.serving import run_simple

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    signal.signal(signal.SIGINT, lambda *_: sys.exit(0))
    run_simple(args.host, args.port, app, threaded=True, request_handler=handler)


if __name__ == "__main__":
    main()
