"""Sandbox start-up and exec latency, local (bubblewrap) vs docker, side by side in one run.

create + exec `true` + destroy, p50/p99 per backend (rounds interleave the backends so noise hits both), and
`true` exec latency in a live sandbox. The docker image is the busybox base made on this machine.

    .venv/bin/python bench/sandbox_bench.py [--n 100]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from harnessproxy.sandbox import SandboxSpec
from harnessproxy.sandbox.docker import DockerSandbox, client
from harnessproxy.sandbox.images import ensure_base_image
from harnessproxy.sandbox.local import LocalSandbox


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))] * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100, help="create+exec+destroy cycles per backend")
    ap.add_argument("--json", help="write results here too")
    args = ap.parse_args()
    task = Path(tempfile.mkdtemp(prefix="hp-sbx-bench-"))
    (task / "a.txt").write_text("hello\n")
    docker = client()
    image = ensure_base_image(docker)
    make = {
        "local": lambda: LocalSandbox(SandboxSpec(task)),
        "docker": lambda: DockerSandbox(SandboxSpec(task), image=image, docker=docker),
    }
    cycle: dict[str, list[float]] = {k: [] for k in make}
    execs: dict[str, list[float]] = {k: [] for k in make}
    for name in make:  # warm-up
        with make[name]() as sb:
            sb.exec(["true"])
    rounds = 5
    for _ in range(rounds):
        for name, new in make.items():
            for _ in range(args.n // rounds):
                t = time.perf_counter()
                sb = new()
                sb.start()
                sb.exec(["true"])
                sb.stop()
                cycle[name].append(time.perf_counter() - t)
            with new() as sb:
                for _ in range(args.n // rounds):
                    t = time.perf_counter()
                    sb.exec(["true"])
                    execs[name].append(time.perf_counter() - t)
    rows = []
    print(f"\n{args.n} cycles per backend in {rounds} interleaved rounds, {os.cpu_count()} cores; ms\n")
    print("| backend | create+exec+destroy p50 | p99 | exec `true` p50 | p99 |")
    print("|---|---|---|---|---|")
    for name in make:
        row = {
            "backend": name,
            "cycle_p50_ms": pct(cycle[name], 0.5),
            "cycle_p99_ms": pct(cycle[name], 0.99),
            "exec_p50_ms": pct(execs[name], 0.5),
            "exec_p99_ms": pct(execs[name], 0.99),
        }
        rows.append(row)
        print(
            f"| {name} | {row['cycle_p50_ms']:.1f} | {row['cycle_p99_ms']:.1f} | {row['exec_p50_ms']:.2f} | "
            f"{row['exec_p99_ms']:.2f} |"
        )
    ratio = statistics.median(cycle["docker"]) / statistics.median(cycle["local"])
    print(f"\nlocal is {ratio:.1f}x faster than docker to create, run `true` in, and destroy a sandbox")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "local_speedup": ratio}, indent=1))


if __name__ == "__main__":
    main()
