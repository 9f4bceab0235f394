"""The /v1/mcq micro-batcher: grouping within the window, per-group batches, failure isolation."""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from medqa.serve.batcher import Batcher
from medqa.serve.errors import APIError


def _run(coro):
    return asyncio.run(coro)


def test_requests_within_the_window_share_one_call():
    calls = []

    def fn(group, payloads):
        calls.append(list(payloads))
        time.sleep(0.01)
        return [p * 10 for p in payloads]

    async def main():
        b = Batcher(fn, ThreadPoolExecutor(1), window_ms=30, max_batch=8)
        b.start()
        out = await asyncio.gather(*(b.submit(i) for i in range(8)))
        await b.stop()
        return out, b.stats

    out, stats = _run(main())
    assert out == [i * 10 for i in range(8)]
    assert len(calls) == 1 and calls[0] == list(range(8)) and stats.largest == 8


def test_max_batch_and_backlog_forms_next_batch():
    calls = []

    def fn(group, payloads):
        calls.append(len(payloads))
        time.sleep(0.02)
        return payloads

    async def main():
        b = Batcher(fn, ThreadPoolExecutor(1), window_ms=5, max_batch=4)
        b.start()
        out = await asyncio.gather(*(b.submit(i) for i in range(10)))
        await b.stop()
        return out

    assert _run(main()) == list(range(10))
    assert max(calls) <= 4 and sum(calls) == 10 and len(calls) <= 4


def test_unbatched_baseline_calls_once_per_request():
    calls = []

    async def main():
        b = Batcher(lambda g, p: calls.append(len(p)) or list(p), ThreadPoolExecutor(1), window_ms=0, max_batch=1)
        b.start()
        await asyncio.gather(*(b.submit(i) for i in range(5)))
        await b.stop()

    _run(main())
    assert calls == [1] * 5


def test_groups_are_not_mixed():
    seen = []

    def fn(group, payloads):
        seen.append((group, list(payloads)))
        return [(group, p) for p in payloads]

    async def main():
        b = Batcher(fn, ThreadPoolExecutor(1), window_ms=20, max_batch=8)
        b.start()
        jobs = [b.submit(i, group="explain" if i % 2 else "plain") for i in range(6)]
        out = await asyncio.gather(*jobs)
        await b.stop()
        return out

    out = _run(main())
    assert out == [("explain" if i % 2 else "plain", i) for i in range(6)]
    assert len(seen) == 2
    for group, payloads in seen:  # each call holds one group only
        assert all(("explain" if p % 2 else "plain") == group for p in payloads)


def test_one_bad_item_does_not_fail_its_batch_mates():
    def fn(group, payloads):
        if "bad" in payloads:
            raise ValueError("bad item")
        return [p.upper() for p in payloads]

    async def main():
        b = Batcher(fn, ThreadPoolExecutor(1), window_ms=20, max_batch=8)
        b.start()
        out = await asyncio.gather(b.submit("a"), b.submit("bad"), b.submit("c"), return_exceptions=True)
        await b.stop()
        return out, b.stats

    (a, bad, c), stats = _run(main())
    assert a == "A" and c == "C" and isinstance(bad, ValueError) and stats.fallbacks == 1


def test_full_queue_is_503():
    async def main():
        b = Batcher(lambda g, p: (time.sleep(0.2), list(p))[1], ThreadPoolExecutor(1), window_ms=0, max_batch=1,
                    max_queue=2)
        b.start()
        tasks = [asyncio.ensure_future(b.submit(i)) for i in range(2)]
        await asyncio.sleep(0)  # the first job is taken by the worker; the queue holds the second
        tasks += [asyncio.ensure_future(b.submit(i)) for i in range(2, 5)]
        out = await asyncio.gather(*tasks, return_exceptions=True)
        await b.stop()
        return out

    out = _run(main())
    errors = [x for x in out if isinstance(x, APIError)]
    assert errors and all(e.status == 503 for e in errors)
    assert [x for x in out if not isinstance(x, Exception)][:2] == [0, 1]


def test_submit_before_start_is_a_clear_error():
    async def main():
        await Batcher(lambda g, p: p, ThreadPoolExecutor(1)).submit(1)

    with pytest.raises(RuntimeError, match="start"):
        _run(main())


def test_window_adapts_to_slow_batches():
    """After a slow batch, the collector waits a fraction of its duration, so staggered arrivals merge."""
    calls = []

    def fn(group, payloads):
        calls.append(list(payloads))
        time.sleep(0.3)
        return payloads

    async def main():
        b = Batcher(fn, ThreadPoolExecutor(1), window_ms=5, max_batch=8, window_frac=0.5)
        b.start()
        await b.submit(0)  # first batch: 5 ms window, takes 0.3 s -> next wait is 150 ms
        second = asyncio.ensure_future(b.submit(1))
        await asyncio.sleep(0.05)  # arrives 50 ms later: beyond 5 ms, within 150 ms
        third = asyncio.ensure_future(b.submit(2))
        await asyncio.gather(second, third)
        await b.stop()

    _run(main())
    assert calls == [[0], [1, 2]]
