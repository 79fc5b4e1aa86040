"""dlock's lock statistics as Prometheus metrics (``pip install dlock[prometheus]``).

Register a collector per client; each scrape reads the client's counts
(:meth:`dlock.Client.stats`)::

    from prometheus_client import REGISTRY
    from dlock.prometheus import DlockCollector

    REGISTRY.register(DlockCollector(client))

Every metric is labelled with the lock's ``name`` and ``kind`` (``lock``, ``semaphore``,
``read``, ``write``); losses also with their ``reason``:

- counters ``dlock_acquired_total``, ``dlock_handed_off_total``, ``dlock_reentered_total``,
  ``dlock_released_total``, ``dlock_busy_total``, ``dlock_timed_out_total``,
  ``dlock_cancelled_total``, ``dlock_failed_total``, ``dlock_renewals_total``,
  ``dlock_renewals_failed_total``, ``dlock_lost_total``;
- gauges ``dlock_held`` and ``dlock_waiting``;
- histograms ``dlock_wait_seconds`` (acquire to grant) and ``dlock_hold_seconds`` (grant to
  release or loss).

Works for :class:`dlock.Client` and :class:`dlock.aio.Client` alike: the scrape runs the
native call on the scraping thread, not on an event loop.
"""

from __future__ import annotations

from typing import Any, Iterator, List

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector

from . import _api

__all__ = ["DlockCollector"]

#: (field of LockStats, metric name, help) of every counter.
COUNTERS = (
    ("acquired", "dlock_acquired", "New holds granted (reentries apart)."),
    ("handed_off", "dlock_handed_off", "Holds granted after waiting for another holder."),
    ("reentered", "dlock_reentered", "Reentries of a hold by its owner."),
    ("released", "dlock_released", "Holds released by their owner."),
    ("busy", "dlock_busy", "Try-acquires that found the lock held."),
    ("timed_out", "dlock_timed_out", "Acquires whose wait ran out."),
    ("cancelled", "dlock_cancelled", "Acquires cancelled while they waited."),
    ("failed", "dlock_failed", "Acquires that ended with an error."),
    ("renewals", "dlock_renewals", "Holds renewed by the watchdog, one per hold per renewal sent."),
    ("renewals_failed", "dlock_renewals_failed", "Renewals with no answer that tells (tried again soon)."),
)

LABELS = ["name", "kind"]


class DlockCollector(Collector):
    """Collects the lock statistics of one dlock client (sync or asyncio) at each scrape."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def collect(self) -> Iterator[Metric]:
        locks: List[_api.LockStats] = _api.stats(self._client._native.stats().wait())
        for field, name, documentation in COUNTERS:
            counter = CounterMetricFamily(name, documentation, labels=LABELS)
            for s in locks:
                counter.add_metric([s.name, s.kind], getattr(s, field))
            yield counter
        lost = CounterMetricFamily("dlock_lost", "Holds lost, by reason.", labels=LABELS + ["reason"])
        for s in locks:
            for reason, n in s.lost.items():
                lost.add_metric([s.name, s.kind, reason], n)
        yield lost
        for field, documentation in (("held", "Holds now."), ("waiting", "Acquires waiting now.")):
            gauge = GaugeMetricFamily(f"dlock_{field}", documentation, labels=LABELS)
            for s in locks:
                gauge.add_metric([s.name, s.kind], getattr(s, field))
            yield gauge
        for field, documentation in (
            ("wait", "From an acquire's start to its grant."),
            ("hold", "From a grant to its release or loss."),
        ):
            histogram = HistogramMetricFamily(f"dlock_{field}_seconds", documentation, labels=LABELS)
            for s in locks:
                h: _api.Histogram = getattr(s, field)
                histogram.add_metric([s.name, s.kind], [(le, float(n)) for le, n in h.buckets], h.sum)
            yield histogram
