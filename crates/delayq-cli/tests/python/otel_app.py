"""The producer and the consumer of the end-to-end tracing tests (trace_e2e.rs).

Each role is its own process with the OpenTelemetry SDK from PyPI, exporting its spans over
OTLP/HTTP (protobuf) to the test's receiver, and printing one JSON line of what it did.

  otel_app.py produce DELAYQ_URL TOPIC ID DELAY_MS OTLP_URL
      a span "place-order"; inside it, POST /add with the context put on the request by
      opentelemetry.propagate.inject (the traceparent header).
  otel_app.py consume DELAYQ_URL TOPIC OTLP_URL
      POST /pop (long poll); the context extracted from the answer's headers is the parent
      of a span "cancel-order", inside which the task is finished (POST /finish with that
      span's context injected, so delayq's finish span is its child).
  otel_app.py serve PORT OTLP_URL
      an HTTP endpoint for push delivery: the context extracted from the request's headers is
      the parent of a span "cancel-order"; answers 200 once, then exits.
"""

import json
import sys
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer

from opentelemetry import propagate, trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor


def tracer(service, otlp_url):
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=otlp_url)))
    trace.set_tracer_provider(provider)
    return provider, trace.get_tracer("delayq-e2e")


def post(url, body, headers=None):
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", **(headers or {})},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return dict(response.headers), json.loads(response.read())


def ids(span):
    ctx = span.get_span_context()
    return {"trace_id": format(ctx.trace_id, "032x"), "span_id": format(ctx.span_id, "016x")}


def produce(base, topic, task_id, delay_ms, otlp_url):
    provider, t = tracer("shop", otlp_url)
    with t.start_as_current_span("place-order", kind=trace.SpanKind.PRODUCER) as span:
        headers = {}
        propagate.inject(headers)
        _, answer = post(
            base + "/add",
            {"topic": topic, "id": task_id, "delay_ms": int(delay_ms), "body": "cancel"},
            headers,
        )
        assert answer["code"] == 0, answer
        out = ids(span)
    provider.shutdown()
    print(json.dumps(out))


def handle(t, headers, topic, task_id, work=None):
    parent = propagate.extract(headers)
    with t.start_as_current_span(
        "cancel-order",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes={"messaging.destination.name": topic, "messaging.message.id": task_id},
    ) as span:
        if work:
            work()
        return ids(span)


def consume(base, topic, otlp_url):
    provider, t = tracer("worker", otlp_url)
    headers, answer = post(base + "/pop", {"topic": topic, "timeout_ms": 20000})
    task = answer["data"]
    assert task, answer
    def finish():
        carrier = {}
        propagate.inject(carrier)
        _, done = post(
            base + "/finish",
            {"topic": topic, "id": task["id"], "receipt": task["receipt"]},
            carrier,
        )
        assert done["code"] == 0, done

    out = handle(t, {k.lower(): v for k, v in headers.items()}, topic, task["id"], finish)
    provider.shutdown()
    out["traceparent"] = task.get("traceparent")
    print(json.dumps(out))


def serve(port, otlp_url):
    provider, t = tracer("worker", otlp_url)
    result = {}

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers.get("content-length", 0)))
            headers = {k.lower(): v for k, v in self.headers.items()}
            result.update(handle(t, headers, headers.get("delayq-topic"), headers.get("delayq-id")))
            result["traceparent"] = headers.get("traceparent")
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", int(port)), Hook)
    print(json.dumps({"listening": int(port)}), flush=True)
    while not result:
        server.handle_request()
    provider.shutdown()
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    role, args = sys.argv[1], sys.argv[2:]
    {"produce": produce, "consume": consume, "serve": serve}[role](*args)
