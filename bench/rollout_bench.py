"""Controller overhead at scale: N rollouts of a trivial task, command adapter + oracle, local sandboxes.

Each rollout's "agent" makes one chat call through its proxy (answered by the oracle) and writes the file the
task checks; each is then scored in a fresh sandbox. Per rollout, the controller's own overhead is its total
time minus the sandbox and agent phases it waits on (agent sandbox start, agent run, artifact/diff collection,
sandbox stop, evaluation in a fresh sandbox): proxy listener start/stop, journals, scheduling, thread hops.

    .venv/bin/python bench/rollout_bench.py [--n 1000] [--c 32]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path

from harnessproxy.agents.spec import get_adapter
from harnessproxy.controller.run import run_rollouts
from harnessproxy.tasks import harbor

TASK = Path(__file__).resolve().parent.parent / "harnessproxy" / "tasks" / "check_task"
AGENT = (
    'python3 -c "import json, os, urllib.request as u; u.urlopen(u.Request('
    "os.environ['OPENAI_BASE_URL'] + '/chat/completions', json.dumps({'model': 'm', 'messages': "
    "[{'role': 'user', 'content': 'hi'}]}).encode(), {'content-type': 'application/json'})).read()\""
    " && echo hello from the oracle > hello.txt"
)
WAITED = ("sandbox_start", "agent", "collect", "sandbox_stop", "eval")


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(q * (len(xs) - 1)))] * 1000


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--c", type=int, default=32)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hp-bench-") as tmp:
        task = harbor.load_one(TASK, stage=Path(tmp) / "stage")
        started = time.monotonic()
        result = run_rollouts(
            [task],
            get_adapter("command"),
            "oracle",
            n=args.n,
            concurrency=args.c,
            agent_command=AGENT,
            runs_dir=Path(tmp),
            retries=0,
        )
        wall = time.monotonic() - started
    rs = result.rollouts
    overhead = [r.timings["total"] - sum(r.timings.get(k, 0.0) for k in WAITED) for r in rs]
    phases = {k: statistics.median(r.timings.get(k, 0.0) for r in rs) * 1000 for k in (*WAITED, "total")}
    out = {
        "rollouts": len(rs),
        "concurrency": args.c,
        "wall_s": round(wall, 1),
        "rollouts_per_s": round(len(rs) / wall, 1),
        "outcomes": dict(Counter(r.outcome for r in rs)),
        "errors": sum(r.outcome == "error" for r in rs),
        "error_messages": dict(Counter(f"{r.error_kind}: {(r.error or '')[:160]}" for r in rs if r.error)),
        "overhead_ms_p50": round(pct(overhead, 0.5), 1),
        "overhead_ms_p99": round(pct(overhead, 0.99), 1),
        "overhead_ms_mean": round(statistics.mean(overhead) * 1000, 1),
        "phase_ms_p50": {k: round(v, 1) for k, v in phases.items()},
        "controller_peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    print(json.dumps(out, indent=1))
    results = Path(__file__).parent / "results"
    results.mkdir(exist_ok=True)
    (results / "rollouts.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
