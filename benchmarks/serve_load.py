"""Bounded load test of ``/v1/mcq``: batched vs unbatched scoring, side by side, on loopback.

One process loads the model once, then for each configuration starts the real app under uvicorn on a
free loopback port and fires ``--requests`` requests with ``--concurrency`` in flight (httpx, async),
``explain=false`` (scoring only).  Reports requests/s, p50/p90/p99 latency, 5xx and other non-200
counts, and the batcher's mean batch size; exits 1 on any 5xx.

    python benchmarks/serve_load.py                       # embedded model, 500 requests, 8 concurrent
    python benchmarks/serve_load.py --requests 100 --json runs/serve_load.json

The client shares the process (and the CPU) with the server, as a co-located load balancer would;
model compute releases the GIL, so the client's share is small.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CONFIGS = {  # name -> ServeSettings overrides
    "batched": {"batch_window_ms": 5.0, "max_batch": 16},
    "unbatched": {"batch_window_ms": 0.0, "max_batch": 1},
}


def payloads() -> list[dict]:
    from medqa.serve.ui import SAMPLES

    out = []
    for i, row in enumerate(SAMPLES):
        out.append({"question": row[0], "options": [o for o in row[1:] if o], "explain": False})
    return out


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


async def fire(url: str, n: int, concurrency: int, bodies: list[dict], timeout: float) -> tuple[list[float], list[int], float]:
    import httpx

    latencies: list[float] = []
    statuses: list[int] = []
    next_i = 0

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal next_i
        while next_i < n:
            i = next_i
            next_i += 1
            body = {**bodies[i % len(bodies)], "id": f"load-{i}"}
            t0 = time.perf_counter()
            try:
                r = await client.post(url + "/v1/mcq", json=body)
                status = r.status_code
            except httpx.HTTPError:
                status = 599  # transport failure counts as a server error
            latencies.append(time.perf_counter() - t0)
            statuses.append(status)

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
        wall = time.perf_counter() - t0
    return latencies, statuses, wall


def run_config(engine, name: str, overrides: dict, args) -> dict:
    import httpx

    from medqa.serve.app import create_app
    from medqa.serve.server import serve_in_thread
    from medqa.serve.settings import ServeSettings

    settings = ServeSettings(rate_limit_per_min=0, max_queue=4096, **overrides)
    app = create_app(engine, settings)
    bodies = payloads()
    with serve_in_thread(app) as url:
        for body in bodies[: args.warmup]:  # warm-up (not timed)
            httpx.post(url + "/v1/mcq", json=body, timeout=args.timeout)
        load0 = os.getloadavg()[0]
        lat, st, wall = asyncio.run(fire(url, args.requests, args.concurrency, bodies, args.timeout))
        load1 = os.getloadavg()[0]
        stats = app.state.batcher.stats.as_dict()
    ms = [x * 1000 for x in lat]
    return {
        "config": name, **overrides, "requests": len(st), "concurrency": args.concurrency,
        "ok": sum(s == 200 for s in st), "5xx": sum(s >= 500 for s in st), "non_200": sum(s != 200 for s in st),
        "wall_s": round(wall, 2), "rps": round(len(st) / wall, 2),
        "p50_ms": round(percentile(ms, 0.50), 1), "p90_ms": round(percentile(ms, 0.90), 1),
        "p99_ms": round(percentile(ms, 0.99), 1), "mean_ms": round(statistics.fmean(ms), 1),
        "mean_batch": stats["mean_batch"], "largest_batch": stats["largest"], "scoring_calls": stats["batches"],
        "loadavg_before": round(load0, 2), "loadavg_after": round(load1, 2),
    }


def markdown(rows: list[dict]) -> str:
    head = "| config | window ms | max batch | requests | conc. | req/s | p50 ms | p99 ms | 5xx | mean batch |"
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        lines.append(f"| {r['config']} | {r['batch_window_ms']:g} | {r['max_batch']} | {r['requests']} | "
                     f"{r['concurrency']} | {r['rps']:.2f} | {r['p50_ms']:.0f} | {r['p99_ms']:.0f} | {r['5xx']} | "
                     f"{r['mean_batch']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="embedded")
    p.add_argument("--adapter")
    p.add_argument("--device", default="cpu")
    p.add_argument("--requests", type=int, default=500)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--configs", default="batched,unbatched", help="comma list of: " + ", ".join(CONFIGS))
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    args = p.parse_args(argv)

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import logging

    logging.basicConfig(level=logging.WARNING)
    from medqa.engine import Engine

    t0 = time.perf_counter()
    engine = Engine.load(args.model, adapter=args.adapter, device=args.device)
    load_s = time.perf_counter() - t0
    rows = []
    for name in args.configs.split(","):
        rows.append(run_config(engine, name, CONFIGS[name], args))
        print(json.dumps(rows[-1]), flush=True)
    by = {r["config"]: r for r in rows}
    ratio = None
    if "batched" in by and "unbatched" in by:
        ratio = round(by["batched"]["rps"] / by["unbatched"]["rps"], 2)
    env = {"python": platform.python_version(), "cpus": os.cpu_count(), "model": engine.model_name,
           "device": engine.info().get("device"), "model_load_s": round(load_s, 1)}
    print()
    print(markdown(rows))
    if ratio is not None:
        print(f"\nbatched / unbatched throughput: {ratio}x")
    print(f"environment: {json.dumps(env)}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"rows": rows, "ratio": ratio, "env": env}, indent=2))
    return 1 if any(r["5xx"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
