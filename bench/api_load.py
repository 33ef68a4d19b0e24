"""A load generator for the coordinator API: N clients asking flat out, each as soon as its last answer came.

    python bench/api_load.py http://127.0.0.1:8470 --clients 32 --seconds 60 --out load.json
    python bench/api_load.py http://127.0.0.1:8470 --mix dashboard

Each client cycles through a mix of what the dashboard and scripts ask for: ``panels`` (the dashboard's panels,
the writer, the timeline, the layout, metrics) or ``dashboard`` (whole dashboard pages and the instants, in
turn: browsers opening the page beside a script listing instants). A 429 is an answer like any other: the
client asks again at once, as a careless script would, without honouring ``Retry-After``. Prints and writes
the answers by status and the p50/p99 of their latencies.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections import Counter

import httpx
import numpy as np

PANELS = [
    "/ui/part/job",
    "/ui/part/batches",
    "/v1/writer",
    "/ui/part/timeline",
    "/v1/timeline?limit=50",
    "/ui/part/services",
    "/v1/layout",
    "/ui/part/quarantine",
    "/metrics",
    "/v1/instants?limit=20",
    "/ui/part/layout",
    "/v1/lease",
]
MIXES = {"panels": PANELS, "dashboard": ["/ui", "/v1/instants"]}


async def _client(base: str, paths: list[str], n: int, until: float, latencies: list[float], statuses: Counter) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        i = n
        while time.monotonic() < until:
            started = time.monotonic()
            try:
                answer = await client.get(paths[i % len(paths)])
                statuses[str(answer.status_code)] += 1
            except httpx.HTTPError as exc:
                statuses[type(exc).__name__] += 1
            latencies.append(time.monotonic() - started)
            i += 1


async def load(base: str, clients: int, seconds: float, mix: str = "panels") -> dict:
    latencies: list[float] = []
    statuses: Counter = Counter()
    until, cpu = time.monotonic() + seconds, time.process_time()
    await asyncio.gather(*(_client(base, MIXES[mix], n, until, latencies, statuses) for n in range(clients)))
    answers = np.array(latencies) if latencies else np.zeros(1)
    return {
        "mix": mix,
        "clients": clients,
        "seconds": seconds,
        "answers": len(latencies),
        "statuses": dict(statuses),
        "p50_s": round(float(np.percentile(answers, 50)), 4),
        "p99_s": round(float(np.percentile(answers, 99)), 4),
        "server_errors": sum(count for status, count in statuses.items() if status.startswith("5")),
        # the clients' own share of this machine's cores, taken from the writer when both run here
        "client_cpu_s": round(time.process_time() - cpu, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base")
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--mix", choices=sorted(MIXES), default="panels")
    parser.add_argument("--out")
    parser.add_argument("--nice", type=int, default=0, help="lower this process's CPU priority by this much first")
    args = parser.parse_args()
    if args.nice:
        os.nice(args.nice)
    result = asyncio.run(load(args.base, args.clients, args.seconds, args.mix))
    print(json.dumps(result))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(result, f)


if __name__ == "__main__":
    main()
