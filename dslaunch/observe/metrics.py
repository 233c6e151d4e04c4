"""Prometheus metrics of a running job: ``--metrics-port`` serves ``/metrics``, ``--metrics-file`` writes the same
text for node-exporter's textfile collector (written aside and renamed, as the collector needs).

The official client, ``prometheus_client``, is imported here only: the CLI imports this module only when one of
the options is given (start-up stays as it was). Every value is read from the observer's
:class:`~dslaunch.observe.session.JobFigures` at each scrape. Labels are bounded: a job state, a restart cause,
a region (at most :data:`MAX_REGIONS`) and a quantile; never a rank or a host.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, start_http_server, write_to_textfile
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from dslaunch.observe.figures import JobFigures
    from dslaunch.observe.settings import ObserveSettings

STATES = ("starting", "running", "restarting", "succeeded", "failed")
MAX_REGIONS = 32


def _gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, value=value)


class JobCollector(Collector):
    def __init__(self, figures: JobFigures) -> None:
        self.figures = figures

    def collect(self) -> Iterator[Any]:
        f, now = self.figures, time.time()
        state = GaugeMetricFamily("dslaunch_job_state", "1 for the job's state now", labels=["state"])
        for name in STATES:
            state.add_metric([name], 1.0 if f.state == name else 0.0)
        yield state
        yield _gauge("dslaunch_attempt", "The attempt running now (0: the first)", f.attempt)
        restarts = CounterMetricFamily("dslaunch_restarts", "Restarts of every rank, by cause", labels=["cause"])
        for cause, count in sorted(dict(f.restarts).items()):
            restarts.add_metric([cause], count)
        yield restarts
        yield _gauge("dslaunch_ranks", "Ranks in the attempt's plan", f.ranks)
        yield _gauge("dslaunch_ranks_alive", "Ranks running now", f.ranks_alive)
        yield _gauge("dslaunch_nodes", "Nodes in the attempt's plan", f.nodes)
        yield _gauge("dslaunch_nodes_alive", "Nodes whose agent has not finished", max(0, f.nodes - f.nodes_done))
        yield CounterMetricFamily("dslaunch_nodes_lost", "Nodes lost during the job", value=f.nodes_lost)
        yield _gauge("dslaunch_step", "The last step a rank's window reported", f.step)
        yield _gauge("dslaunch_step_rate", "Steps per second in the last window (median rank)", f.step_rate)
        ttfs = f.first_step_at - f.started if f.first_step_at else float("nan")
        yield _gauge("dslaunch_time_to_first_step_seconds", "From the launcher's start to the first step", ttfs)
        yield _gauge("dslaunch_goodput_ratio", "Time in steps kept over the job's wall time", f.goodput(now))
        wall = GaugeMetricFamily(
            "dslaunch_wall_seconds",
            "The job's wall time so far by phase: steps kept, startup, restarts, lost_work, other",
            labels=["phase"],
        )
        for phase, seconds in f.wall_split(now).items():
            wall.add_metric([phase], seconds)
        yield wall
        yield _gauge("dslaunch_stragglers", "Ranks and regions named as stragglers now", f.stragglers)
        yield from self._regions(f)

    def _regions(self, f: JobFigures) -> Iterator[Any]:
        seconds = GaugeMetricFamily(
            "dslaunch_region_seconds",
            "Seconds per step in a timer region over the last window: quantile 0 (fastest rank), 0.5, 1 (slowest)",
            labels=["region", "quantile"],
        )
        slowest = GaugeMetricFamily("dslaunch_slowest_rank", "The slowest rank in a region", labels=["region"])
        for s in f.regions[:MAX_REGIONS]:
            for quantile, value in (("0", s.min), ("0.5", s.median), ("1", s.max)):
                seconds.add_metric([s.region, quantile], value)
            slowest.add_metric([s.region], s.slowest_rank)
        yield seconds
        yield slowest


class Exporter:
    """The registry, its HTTP server (``--metrics-port``) and its file (``--metrics-file``)."""

    def __init__(self, settings: ObserveSettings, figures: JobFigures) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(JobCollector(figures))
        self.path = settings.metrics_file
        self.server: Any = None
        if settings.metrics_port is not None:
            self.server, _thread = start_http_server(
                settings.metrics_port, addr=settings.metrics_addr or "0.0.0.0", registry=self.registry
            )

    def write_file(self) -> None:
        if self.path:
            try:
                write_to_textfile(self.path, self.registry)
            except OSError:
                pass

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
