"""What `GET /metrics` tells Prometheus: requests, latency, batch sizes, feedback, the version being served."""

from __future__ import annotations

import time

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from starlette.responses import Response

disable_created_metrics()  # the *_created series only repeat the start time


class PrometheusText(Response):
    """A reply in Prometheus' text format, its content type as the OpenAPI document of /metrics says it."""

    media_type = CONTENT_TYPE_LATEST


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, gateway):
        self.registry = registry = CollectorRegistry()  # the gateway's own: two apps in one process stay apart
        self.requests = Counter("rmi_requests", "HTTP requests by route and status", ["route", "status"],
                                registry=registry)
        self.latency = Histogram("rmi_request_seconds", "Time to answer a request, by route", ["route"],
                                 buckets=(.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10),
                                 registry=registry)
        self.batch = Histogram("rmi_batch_prompts", "Prompts decoded together in one forward pass",
                               buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256), registry=registry)
        self.prompts = Counter("rmi_prompts_answered", "Prompts answered", registry=registry)
        self.feedback = Counter("rmi_feedback", "Feedback recorded, by rating", ["rating"], registry=registry)
        self.flushed = Counter("rmi_feedback_batches_written", "Feedback batch files written into incoming/",
                               registry=registry)
        version = Gauge("rmi_model_version", "The model version answering (0: none loaded)", ["model", "alias"],
                        registry=registry)
        version.labels(gateway.model_name, gateway.alias).set_function(
            lambda: int(gateway.model.current.version) if gateway.model.current else 0)
        Gauge("rmi_feedback_log_pending", "Events on disk in the log, not yet in a batch file",
              registry=registry).set_function(gateway.log.pending)

    def render(self) -> bytes:
        return generate_latest(self.registry)


class RequestMetrics:
    """ASGI middleware, outermost: every request counted by route and status, and timed, refusals included.
    A path no route has counts as "other", so that a scan of random paths adds no series."""

    def __init__(self, app, metrics: Metrics, routes: frozenset[str]):
        import re

        self.app, self.metrics, self.routes = app, metrics, routes
        # a path with a parameter counts under its template: a user's id never becomes a label
        self.templates = [(re.compile(re.sub(r"\\\{\w+\\\}", "[^/]+", re.escape(r)) + "$"), r)
                          for r in routes if "{" in r]
        self._counters: dict[tuple[str, int], object] = {}
        self._histograms: dict[str, object] = {}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"]
        route = path if path in self.routes else next((r for t, r in self.templates if t.match(path)), "other")
        started, status = time.perf_counter(), {"code": 500}

        async def counted(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, counted)
        finally:
            self._counted(route, status["code"]).inc()
            self._timed(route).observe(time.perf_counter() - started)

    def _counted(self, route: str, status: int):
        """The route's counter for `status`, looked up once (labels() takes a lock and builds a key each time)."""
        if (counter := self._counters.get((route, status))) is None:
            counter = self._counters[route, status] = self.metrics.requests.labels(route, str(status))
        return counter

    def _timed(self, route: str):
        if (histogram := self._histograms.get(route)) is None:
            histogram = self._histograms[route] = self.metrics.latency.labels(route)
        return histogram
