"""Micro-batching for ``/v1/mcq``: requests that arrive within a few milliseconds share one scoring call.

The event loop never runs the model.  A single collector task takes whatever is queued (up to
``max_batch``), waits a few ms for more when the batch is not full, and hands the batch to
a worker thread (``run_in_executor``); while that batch runs, new requests queue up and form the next
batch, so under load batches fill by themselves.

The wait adapts to the model's speed: it is ``max(window_ms, window_frac x duration of the last
batch)``, capped at ``max_window_ms``.  Closed-loop clients otherwise lock into "cohorts": the
clients answered by one batch resubmit a few ms after the clients of the previous batch, a fixed
5 ms window never merges them, and batches stay half full.  Waiting 2% of a 4 s CPU batch (80 ms)
merges them; on a GPU, where a batch takes ~20 ms, the wait stays at ``window_ms``.

Jobs carry a ``group`` key (e.g. the explain flag): only jobs with equal keys are batched together.
``window_ms=0, max_batch=1`` is the unbatched baseline.

If a whole batch fails, its jobs are retried one by one so a single bad question cannot fail the
requests it happened to be batched with.
"""
from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Sequence

from .errors import APIError

log = logging.getLogger("medqa.serve")

BatchFn = Callable[[Hashable, Sequence[Any]], Sequence[Any]]  # (group, payloads) -> one result per payload


@dataclass
class _Job:
    payload: Any
    group: Hashable
    future: asyncio.Future
    enqueued: float = field(default_factory=time.perf_counter)


@dataclass
class BatchStats:
    batches: int = 0
    items: int = 0
    largest: int = 0
    fallbacks: int = 0  # batches retried one by one after a failure
    busy_s: float = 0.0

    def as_dict(self) -> dict:
        mean = self.items / self.batches if self.batches else 0.0
        return {"batches": self.batches, "items": self.items, "mean_batch": round(mean, 2), "largest": self.largest,
                "fallbacks": self.fallbacks, "busy_s": round(self.busy_s, 3)}


class Batcher:
    def __init__(self, fn: BatchFn, executor: Executor, window_ms: float = 5.0, max_batch: int = 16,
                 max_queue: int = 1024, window_frac: float = 0.02, max_window_ms: float = 250.0):
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.fn, self.executor = fn, executor
        self.window, self.max_batch, self.max_queue = window_ms / 1000.0, max_batch, max_queue
        self.window_frac, self.max_window = window_frac, max_window_ms / 1000.0
        self.last_batch_s = 0.0
        self.stats = BatchStats()
        self._pending: deque[_Job] = deque()
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task | None = None

    # ------------------------------------------------------------------ lifecycle (call inside the event loop)
    def start(self) -> None:
        if self._task is None:
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._collect(), name="medqa-batcher")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        while self._pending:
            job = self._pending.popleft()
            if not job.future.done():
                job.future.set_exception(APIError(503, "server is shutting down; retry against another instance"))

    @property
    def queued(self) -> int:
        return len(self._pending)

    # ------------------------------------------------------------------ API
    async def submit(self, payload: Any, group: Hashable = None) -> Any:
        if self._task is None or self._wake is None:
            raise RuntimeError("Batcher.start() was not called (the app lifespan starts it)")
        if len(self._pending) >= self.max_queue:
            raise APIError(503, f"server busy: {len(self._pending)} questions queued; retry shortly "
                                "(or raise --max-queue)", code="overloaded", headers={"Retry-After": "1"})
        job = _Job(payload, group, asyncio.get_running_loop().create_future())
        self._pending.append(job)
        self._wake.set()
        return await job.future

    # ------------------------------------------------------------------ collector
    async def _collect(self) -> None:
        assert self._wake is not None
        loop = asyncio.get_running_loop()
        while True:
            while not self._pending:
                self._wake.clear()
                await self._wake.wait()
            if self.window > 0 and self.max_batch > 1:
                wait = min(self.max_window, max(self.window, self.window_frac * self.last_batch_s))
                deadline = loop.time() + wait
                while len(self._pending) < self.max_batch and (left := deadline - loop.time()) > 0:
                    self._wake.clear()
                    try:
                        await asyncio.wait_for(self._wake.wait(), left)
                    except asyncio.TimeoutError:
                        break
            batch = self._take()
            if batch:
                await self._run(loop, batch)

    def _take(self) -> list[_Job]:
        """Up to max_batch live jobs of the first job's group, in arrival order; others stay queued."""
        first_group, batch, keep = None, [], deque()
        while self._pending and len(batch) < self.max_batch:
            job = self._pending.popleft()
            if job.future.done():  # the client went away
                continue
            if not batch:
                first_group = job.group
            if job.group == first_group:
                batch.append(job)
            else:
                keep.append(job)
        self._pending.extendleft(reversed(keep))
        return batch

    async def _run(self, loop: asyncio.AbstractEventLoop, batch: list[_Job]) -> None:
        t0 = time.perf_counter()
        group = batch[0].group
        try:
            results = await loop.run_in_executor(self.executor, self._call, group, [j.payload for j in batch])
            outcomes: list[tuple[bool, Any]] = [(True, r) for r in results]
        except Exception as exc:  # noqa: BLE001 - isolate the failing job below
            if len(batch) == 1:
                outcomes = [(False, exc)]
            else:
                self.stats.fallbacks += 1
                outcomes = []
                for job in batch:
                    try:
                        r = await loop.run_in_executor(self.executor, self._call, group, [job.payload])
                        outcomes.append((True, r[0]))
                    except Exception as one:  # noqa: BLE001
                        outcomes.append((False, one))
        self.stats.batches += 1
        self.stats.items += len(batch)
        self.stats.largest = max(self.stats.largest, len(batch))
        self.last_batch_s = time.perf_counter() - t0
        self.stats.busy_s += self.last_batch_s
        for job, (ok, value) in zip(batch, outcomes):
            if job.future.done():
                continue
            if ok:
                job.future.set_result(value)
            else:
                job.future.set_exception(value)

    def _call(self, group: Hashable, payloads: list[Any]) -> list[Any]:
        results = list(self.fn(group, payloads))
        if len(results) != len(payloads):
            raise RuntimeError(f"batch function returned {len(results)} results for {len(payloads)} inputs")
        return results
