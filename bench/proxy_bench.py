"""Streamed calls through harnessproxy vs directly to the same fast local upstream, side by side in one run,
with mitmproxy (reverse mode) and LiteLLM's proxy on the same load when installed (bench/setup.sh).

Each target is a separate process; the load generator is this process. A call = one streamed Chat Completions
request of ~200 SSE events, read to the end. Reported: latency p50/p99 at 1 and 64 concurrent clients, added
latency vs direct, throughput ratio vs direct, and the proxy process's RSS (idle and peak under 64 streams).

    .venv/bin/python bench/proxy_bench.py [--requests 300] [--litellm .venv-litellm/bin/litellm]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
# LiteLLM refuses to start without a master key; every target gets the same bearer (harnessproxy drops it).
KEY = "sk-hp-bench-7c1f9e2a5b8d4e6f"
HEADERS = {"authorization": f"Bearer {KEY}"}
MODEL = "chat_text@repeat=100"  # role chunk + 200 content deltas + finish + usage + [DONE] = 204 events
BODY = {
    "model": MODEL,
    "messages": [{"role": "user", "content": "hi"}],
    "stream": True,
    "stream_options": {"include_usage": True},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_s(pid: int | None) -> float:
    """User+system CPU seconds of a process and its children threads (robust to this VM's steal time)."""
    if not pid:
        return 0.0
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int, field_name: str = "VmRSS") -> float:
    total = 0.0
    pids = [pid] + [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    for p in pids:
        for line in Path(f"/proc/{p}/status").read_text().splitlines():
            if line.startswith(field_name + ":"):
                total += int(line.split()[1]) / 1024
    return total


async def wait_ready(url: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            try:
                async with http.post(url + "/v1/chat/completions", json=BODY, headers=HEADERS) as r:
                    if r.status == 200 and b"[DONE]" in await r.read():
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.25)
    raise RuntimeError(f"{url} never answered")


@dataclass
class Result:
    name: str
    lat1: list[float] = field(default_factory=list)
    lat64: list[float] = field(default_factory=list)
    rounds_rps: list[float] = field(default_factory=list)
    cpu: float = 0.0  # CPU seconds the target spent on the measured calls
    calls: int = 0
    paced: list[float] = field(default_factory=list)
    paced_ttfb: list[float] = field(default_factory=list)
    rss_idle: float | None = None
    rss_peak: float | None = None
    events: int = 0

    @property
    def rps64(self) -> float:
        return statistics.median(self.rounds_rps)


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))] * 1000


async def one(http: aiohttp.ClientSession, url: str, body: dict = BODY) -> tuple[float, int]:
    t = time.perf_counter()
    async with http.post(url, json=body, headers=HEADERS) as r:
        data = await r.read()
    if r.status != 200 or not data.rstrip().endswith(b"[DONE]"):
        raise RuntimeError(f"bad response {r.status}: {data[:200]!r}")
    return time.perf_counter() - t, data.count(b"\n\n")


async def measure_round(res: Result, base: str, n: int, pid: int | None) -> None:
    """One round for one target: n sequential calls, then 64 concurrent clients doing 3n calls in all."""
    url = base + "/v1/chat/completions"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        for _ in range(10):  # warm the connections
            _, res.events = await one(http, url)
        if pid and res.rss_idle is None:
            res.rss_idle = rss_mb(pid)
        cpu0 = cpu_s(pid)
        for _ in range(n):
            res.lat1.append((await one(http, url))[0])
        peak = res.rss_peak or 0.0
        stop = asyncio.Event()

        async def sample() -> None:
            nonlocal peak
            while not stop.is_set():
                if pid:
                    peak = max(peak, rss_mb(pid))
                await asyncio.sleep(0.02)

        async def worker(k: int) -> None:
            for _ in range(k):
                res.lat64.append((await one(http, url))[0])

        sampler = asyncio.create_task(sample())
        per = max(1, 3 * n // 64)
        t = time.perf_counter()
        await asyncio.gather(*(worker(per) for _ in range(64)))
        res.rounds_rps.append(64 * per / (time.perf_counter() - t))
        res.cpu += cpu_s(pid) - cpu0
        res.calls += n + 64 * per
        stop.set()
        await sampler
        res.rss_peak = peak if pid else None


PACED = {**BODY, "model": "chat_text@repeat=25,delay=0.02"}  # 54 events at ~50/s per stream, like a model


async def measure_paced(res: Result, base: str, n: int) -> None:
    """64 concurrent streams at a model-like pace: what an agent actually sees added."""
    url = base + "/v1/chat/completions"
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:

        async def worker() -> None:
            for _ in range(n):
                t = time.perf_counter()
                async with http.post(url, json=PACED, headers=HEADERS) as r:
                    await r.content.readany()
                    res.paced_ttfb.append(time.perf_counter() - t)
                    await r.read()
                res.paced.append(time.perf_counter() - t)

        await asyncio.gather(*(worker() for _ in range(64)))


def spawn(argv: list[str], env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env={**os.environ, **(env or {})},
    )


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=400, help="sequential calls at c=1 per target (c=64: 3x)")
    ap.add_argument("--rounds", type=int, default=4, help="interleaved rounds the calls are spread over")
    ap.add_argument("--litellm", default=str(ROOT / ".venv-litellm/bin/litellm"))
    ap.add_argument("--mitmdump", default=str(ROOT / ".venv-mitm/bin/mitmdump"))
    ap.add_argument("--json", help="write results here too")
    args = ap.parse_args()
    hp = [sys.executable, "-m", "harnessproxy.cli"]
    tmp = Path(tempfile.mkdtemp(prefix="hp-bench-"))
    procs: list[subprocess.Popen] = []
    up_port = free_port()
    procs.append(spawn([*hp, "scripted-upstream", "--listen", f"127.0.0.1:{up_port}"]))
    upstream = f"http://127.0.0.1:{up_port}"
    targets: list[tuple[str, str, subprocess.Popen | None]] = [("direct", upstream, None)]

    port = free_port()
    p = spawn(
        [*hp, "proxy", "--listen", f"127.0.0.1:{port}", "--upstream", upstream, "--journal-dir", str(tmp)]
    )
    procs.append(p)
    targets.append(("harnessproxy", f"http://127.0.0.1:{port}", p))

    if Path(args.mitmdump).exists():
        port = free_port()
        p = spawn(
            [
                args.mitmdump,
                "-q",
                "--mode",
                f"reverse:{upstream}",
                "--listen-host",
                "127.0.0.1",
                "--listen-port",
                str(port),
                "--set",
                "stream_large_bodies=1",
                "--set",
                f"confdir={tmp}/mitm",
            ]
        )
        procs.append(p)
        targets.append(("mitmproxy (reverse, streaming)", f"http://127.0.0.1:{port}", p))
    if Path(args.litellm).exists():
        port = free_port()
        cfg = tmp / "litellm.yaml"
        cfg.write_text(
            json.dumps(
                {
                    "model_list": [
                        {
                            "model_name": MODEL,
                            "litellm_params": {
                                "model": f"openai/{MODEL}",
                                "api_base": upstream + "/v1",
                                "api_key": "sk-bench",
                            },
                        }
                    ]
                }
            )
        )
        p = spawn(
            [
                args.litellm,
                "--config",
                str(cfg),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--num_workers",
                "1",
            ],
            env={
                "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                "LITELLM_MASTER_KEY": KEY,
                "LITELLM_LOG": "ERROR",
                "NO_DOCS": "True",
                "DISABLE_ADMIN_UI": "True",
            },
        )
        procs.append(p)
        targets.append(("litellm proxy", f"http://127.0.0.1:{port}", p))

    try:
        for _, base, _ in targets:
            await wait_ready(base)
        results = [Result(name) for name, _, _ in targets]
        # Rounds interleave the targets, so a slow patch of this shared machine hits all of them alike.
        for _ in range(args.rounds):
            for res, (_, base, proc) in zip(results, targets, strict=True):
                await measure_round(res, base, args.requests // args.rounds, proc.pid if proc else None)
        # LiteLLM cannot keep 64 paced streams at ~6 calls/s, and it keeps draining its logging queue long
        # after a load: stop it first, or it steals the CPU the paced streams are measured on.
        for (name, _, proc), _res in zip(targets, results, strict=True):
            if name.startswith("litellm") and proc:
                proc.terminate()
                proc.wait(timeout=30)
        await asyncio.sleep(2)
        for _ in range(2):
            for res, (name, base, _) in zip(results, targets, strict=True):
                if not name.startswith("litellm"):
                    await measure_paced(res, base, 1)
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=30)
    report(results, args)


def report(results: list[Result], args: argparse.Namespace) -> None:
    d = results[0]
    print(
        f"\n{d.events} SSE events per call; c=1: {len(d.lat1)} calls, c=64: {len(d.lat64)} calls per target, "
        f"in {args.rounds} interleaved rounds; {os.cpu_count()} cores. '+' = added vs direct, tput = median "
        "round throughput at c=64 vs direct, CPU = the target process's CPU per call, paced = 64 streams of "
        "54 events 20 ms apart (~1 s per call, like a model streaming 50 tokens/s)\n"
    )
    cols = [
        "target",
        "p50 c1",
        "p99 c1",
        "+p50 c1",
        "+p99 c1",
        "p50 c64",
        "p99 c64",
        "rps c64",
        "tput",
        "CPU/call",
        "RSS idle",
        "RSS c64",
        "+TTFB paced",
        "+p50 paced",
    ]
    print(f"| {' | '.join(cols)} |")
    print("|" + "---|" * len(cols))
    rows = []
    for r in results:
        paced = bool(r.paced and d.paced)
        row = {
            "target": r.name,
            "p50_c1_ms": pct(r.lat1, 0.5),
            "p99_c1_ms": pct(r.lat1, 0.99),
            "added_p50_c1_ms": pct(r.lat1, 0.5) - pct(d.lat1, 0.5),
            "added_p99_c1_ms": pct(r.lat1, 0.99) - pct(d.lat1, 0.99),
            "p50_c64_ms": pct(r.lat64, 0.5),
            "p99_c64_ms": pct(r.lat64, 0.99),
            "rps_c64": r.rps64,
            "throughput_vs_direct": r.rps64 / d.rps64,
            "cpu_ms_per_call": r.cpu / r.calls * 1000 if r.calls and r.cpu else None,
            "rss_idle_mb": r.rss_idle,
            "rss_peak_c64_mb": r.rss_peak,
            "added_ttfb_p50_paced_ms": pct(r.paced_ttfb, 0.5) - pct(d.paced_ttfb, 0.5) if paced else None,
            "added_p50_paced_ms": pct(r.paced, 0.5) - pct(d.paced, 0.5) if paced else None,
        }
        rows.append(row)

        def f(v: float | None, fmt: str, unit: str = "") -> str:
            return "-" if v is None else format(v, fmt) + unit

        print(
            f"| {r.name} | {row['p50_c1_ms']:.2f} | {row['p99_c1_ms']:.2f} | {row['added_p50_c1_ms']:.2f} | "
            f"{row['added_p99_c1_ms']:.2f} | {row['p50_c64_ms']:.0f} | {row['p99_c64_ms']:.0f} | "
            f"{r.rps64:.0f} | "
            f"{row['throughput_vs_direct']:.2f}x | {f(row['cpu_ms_per_call'], '.2f', ' ms')} | "
            f"{f(r.rss_idle, '.0f', ' MB')} | {f(r.rss_peak, '.0f', ' MB')} | "
            f"{f(row['added_ttfb_p50_paced_ms'], '.2f')} | {f(row['added_p50_paced_ms'], '.1f')} |"
        )
    print("\nlatencies in ms")
    ours = next(r for r in rows if r["target"] == "harnessproxy")
    for other in rows[2:]:
        print(
            f"harnessproxy vs {other['target']}: throughput {ours['rps_c64'] / other['rps_c64']:.2f}x, "
            f"added p50 at c=1 {ours['added_p50_c1_ms']:.2f} ms vs {other['added_p50_c1_ms']:.2f} ms"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    asyncio.run(main())
