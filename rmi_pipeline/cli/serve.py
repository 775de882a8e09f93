"""`rmi serve`: the gateway on 127.0.0.1:8000 (FastAPI on uvicorn), answering with the champion and taking feedback."""

from __future__ import annotations

import os
import signal
import threading
import time

from ..settings import Settings
from .home import prepare_home, say, server_logging


def cmd_serve(args) -> int:
    settings = Settings()
    prepare_home(settings)
    import uvicorn

    from ..serving.app import build_app

    server_logging()
    if args.exit_with_parent:
        _exit_with_parent()
    app = build_app(settings, alias=args.alias)
    keys = len(settings.serving.api_keys)
    say(f"rmi serve: {settings.model_name}@{args.alias} on http://{args.host}:{args.port} "
        f"({f'{keys} API keys' if keys else 'no API keys: anyone who can reach it may call it'}; Ctrl-C stops it)")
    uvicorn.run(app, host=args.host, port=args.port, log_level="info", access_log=args.access_log,
                timeout_graceful_shutdown=10)
    return 0


def _exit_with_parent() -> None:
    """When the process that started this gateway is gone (a killed `rmi run`), stop as if told to: SIGTERM, which
    lets uvicorn finish its requests and the log write its last batch."""
    parent = os.getppid()

    def watch():
        while os.getppid() == parent:
            time.sleep(1)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def add_serve_command(sub) -> None:
    serve = sub.add_parser("serve", help="answer with the champion and take feedback over HTTP",
                           description="The gateway: POST /v1/answers, /v1/completions (OpenAI), /v1/feedback; "
                           "GET /, /healthz, /readyz, /metrics. Settings: RMI_SERVE_* (README).")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s; 0.0.0.0 "
                       "for every interface: set RMI_SERVE_API_KEYS first)")
    serve.add_argument("--port", type=int, default=8000, help="port (default %(default)s)")
    serve.add_argument("--alias", default="champion", help="the registry alias to serve and follow "
                       "(default %(default)s)")
    serve.add_argument("--access-log", action="store_true", help="log every request line (never bodies)")
    serve.add_argument("--exit-with-parent", action="store_true", help="stop when the process that started this "
                       "one exits (how `rmi run` starts it)")
    serve.set_defaults(fn=cmd_serve)
