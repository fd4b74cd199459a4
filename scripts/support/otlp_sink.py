"""A local OTLP/HTTP sink for scripts/bench: answers 200 to every POST (the spans are read and
dropped), so the bench measures what exporting costs delayq, not a collector.

  otlp_sink.py PORT
"""

import http.server
import sys


class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
