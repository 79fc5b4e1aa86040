"""dlock's lock statistics as Prometheus metrics (``pip install dlock[prometheus]``).

Register a collector per client; each scrape reads the client's counts
(:meth:`dlock.Client.stats`)::

    from prometheus_client import REGISTRY
    from dlock.prometheus import DlockCollector

    REGISTRY.register(DlockCollector(client))

Every metric is labelled with the lock's ``name`` and ``kind`` (``lock``, ``semaphore``,
``read``, ``write``); losses also with their ``reason``. The names are the Rust crate's
(``dlock::prometheus``), shared by every host: counters ``dlock_acquired_total``,
``dlock_handed_off_total``, …, ``dlock_lost_total``; gauges ``dlock_held`` and
``dlock_waiting``; histograms ``dlock_wait_seconds`` (acquire to grant) and
``dlock_hold_seconds`` (grant to release or loss).

Works for :class:`dlock.Client` and :class:`dlock.aio.Client` alike: the scrape runs the
native call on the scraping thread, not on an event loop.
"""

from __future__ import annotations

from typing import Any, Iterator, List

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from . import _api
from ._dlock import METRIC_COUNTERS, METRIC_GAUGES, METRIC_HISTOGRAMS, METRIC_LOST

__all__ = ["DlockCollector"]

LABELS = ["name", "kind"]


class DlockCollector(Collector):
    """Collects the lock statistics of one dlock client (sync or asyncio) at each scrape."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def collect(self) -> Iterator[Metric]:
        locks: List[_api.LockStats] = _api.stats(self._client._native.stats().wait())
        for field, name, documentation in METRIC_COUNTERS:
            counter = CounterMetricFamily(name, documentation, labels=LABELS)
            for s in locks:
                counter.add_metric([s.name, s.kind], getattr(s, field))
            yield counter
        name, documentation = METRIC_LOST
        lost = CounterMetricFamily(name, documentation, labels=LABELS + ["reason"])
        for s in locks:
            for reason, n in s.lost.items():
                lost.add_metric([s.name, s.kind, reason], n)
        yield lost
        for field, name, documentation in METRIC_GAUGES:
            gauge = GaugeMetricFamily(name, documentation, labels=LABELS)
            for s in locks:
                gauge.add_metric([s.name, s.kind], getattr(s, field))
            yield gauge
        for field, name, documentation in METRIC_HISTOGRAMS:
            histogram = HistogramMetricFamily(name, documentation, labels=LABELS)
            for s in locks:
                h: _api.Histogram = getattr(s, field)
                histogram.add_metric([s.name, s.kind], [(le, float(n)) for le, n in h.buckets], h.sum)
            yield histogram
