"""A webhook receiver on 127.0.0.1 for alert tests: it keeps every JSON body posted to it."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer


def serve_hook(bodies: list, port: int = 0) -> HTTPServer:
    """Start the receiver in a thread (on `port`, or any free one); stop it with .shutdown()."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server
