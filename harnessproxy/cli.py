"""The `harnessproxy` command: a thin typer layer over harnessproxy.api."""

from __future__ import annotations

import csv
import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import duckdb
import typer
from rich.console import Console
from rich.table import Table

from harnessproxy import __version__, api

app = typer.Typer(
    help="Run agent CLIs in sandboxes, record every LLM call through a per-rollout proxy, keep it in DuckDB.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Piped output (CI logs, `| less`) gets wide tables instead of rich's 80-column default.
console = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True)

DbOpt = Annotated[Path, typer.Option("--db", help="DuckDB file.")]


def _fail(message: str) -> None:
    err.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(2)


@app.command()
def proxy(
    upstream: Annotated[
        str, typer.Option(help="Upstream base URL speaking the same protocol(s) as the agent.")
    ],
    listen: Annotated[str, typer.Option(help="HOST:PORT to listen on (port 0 picks one).")] = "127.0.0.1:0",
    upstream_key_env: Annotated[
        str | None, typer.Option(help="Host env var holding the upstream key; the agent's key is dropped.")
    ] = None,
    rollout_id: Annotated[
        str | None, typer.Option(help="Rollout every call on this listener belongs to.")
    ] = None,
    db: Annotated[Path | None, typer.Option(help="DuckDB file to load the journal into on exit.")] = None,
    journal_dir: Annotated[Path, typer.Option(help="Where the per-rollout JSONL journal goes.")] = (
        api.DEFAULT_JOURNAL_DIR
    ),
) -> None:
    """Run one recording proxy listener (one rollout) until Ctrl-C / SIGTERM."""

    def ready(p: api.RunningProxy) -> None:
        console.print(
            f"harnessproxy: listening on {p.url} rollout={p.server.rollout_id} journal={p.journal.path}",
            soft_wrap=True,
            highlight=False,
        )
        sys.stdout.flush()

    try:
        loaded = api.serve_proxy(
            listen,
            upstream,
            upstream_key_env=upstream_key_env,
            rollout_id=rollout_id,
            db=db,
            journal_dir=journal_dir,
            on_ready=ready,
        )
    except api.ConfigError as exc:
        _fail(str(exc))
    if db:
        console.print(f"harnessproxy: loaded {loaded} call(s) into {db}", highlight=False)


@app.command()
def ingest(
    journals: Annotated[list[Path], typer.Argument(help="Journal files (.jsonl) to load.")],
    db: DbOpt = Path("runs.duckdb"),
) -> None:
    """Load journals into DuckDB (idempotent; use after a crash)."""
    from harnessproxy.store import load_journals

    missing = [str(p) for p in journals if not p.is_file()]
    if missing:
        _fail(f"no such journal: {', '.join(missing)}")
    console.print(f"loaded {load_journals(db, journals)} new call(s) into {db}")


class Format(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


@app.command()
def sql(
    query: Annotated[str, typer.Argument(help='SQL to run, e.g. "SELECT * FROM llm_calls".')],
    db: DbOpt = Path("runs.duckdb"),
    format: Annotated[Format, typer.Option("--format", "-f", help="Output format.")] = Format.table,
) -> None:
    """Run a SQL query against the DuckDB store and print the result."""
    try:
        columns, rows = api.query(db, query)
    except duckdb.Error as exc:
        _fail(str(exc))
    print_rows(columns, rows, format)


def print_rows(columns: list[str], rows: list[tuple[Any, ...]], fmt: Format = Format.table) -> None:
    if fmt is Format.csv:
        w = csv.writer(sys.stdout)
        w.writerow(columns)
        w.writerows(rows)
    elif fmt is Format.json:
        print(json.dumps([dict(zip(columns, r, strict=True)) for r in rows], default=str, indent=1))
    else:
        table = Table(*columns, show_lines=False)
        for r in rows:
            table.add_row(*("" if v is None else str(v) for v in r))
        console.print(table)


@app.command()
def demo(
    db: DbOpt = Path("demo.duckdb"),
    journal_dir: Annotated[Path, typer.Option(help="Where the journal goes.")] = api.DEFAULT_JOURNAL_DIR,
) -> None:
    """Drive the proxy with the official SDKs against the bundled scripted upstream; show the record."""
    from harnessproxy.demo import run_demo

    try:
        journal, loaded, key_swapped = run_demo(db, journal_dir)
    except api.ConfigError as exc:
        _fail(str(exc))
    console.print(f"journal: {journal}  ({loaded} call(s) loaded into {db})", highlight=False)
    console.print(
        "upstream saw only the host key (agent's dummy key dropped): "
        + ("[green]yes[/]" if key_swapped else "[red]NO[/]")
    )
    columns, rows = api.query(
        db,
        "SELECT seq, protocol, kind, model, stream, status, stop_reason, input_tokens AS in_tok, "
        "output_tokens AS out_tok, round(first_byte_ms, 1) AS first_byte_ms, round(duration_ms, 1) AS ms "
        f"FROM llm_calls WHERE rollout_id = '{journal.stem}' ORDER BY seq",
    )
    print_rows(columns, rows)
    console.print(
        f'next: harnessproxy sql --db {db} "SELECT response_body FROM llm_calls WHERE seq = 1"',
        highlight=False,
    )


@app.command("scripted-upstream")
def scripted_upstream(
    listen: Annotated[str, typer.Option(help="HOST:PORT to listen on.")] = "127.0.0.1:8765",
) -> None:
    """Serve the bundled golden transcripts as a model server (for trying a harness or the proxy offline)."""
    from harnessproxy.proxy.scripted import serve_forever

    try:
        host, port = api.parse_listen(listen)
    except api.ConfigError as exc:
        _fail(str(exc))
    serve_forever(host, port, lambda url: console.print(f"scripted upstream on {url}", highlight=False))


sandbox_app = typer.Typer(
    help="Run commands in isolated sandboxes (what an agent sees).", no_args_is_help=True
)
app.add_typer(sandbox_app, name="sandbox")


@sandbox_app.command("run", context_settings={"allow_interspersed_args": False})
def sandbox_run(
    cmd: Annotated[list[str], typer.Argument(help="The command and its arguments (after --).")],
    workspace: Annotated[Path, typer.Option(help="Folder the sandbox sees, copy-on-write; never modified.")],
    timeout: Annotated[
        float | None, typer.Option(help="Kill the command's whole tree after S seconds.")
    ] = None,
    backend: Annotated[str, typer.Option(help="local (bubblewrap) or docker.")] = "local",
    image: Annotated[str | None, typer.Option(help="Docker image (docker backend; never pulled).")] = None,
) -> None:
    """Run one command in a fresh sandbox over DIR; print its output, exit code and the diff."""
    from harnessproxy.sandbox import SandboxError, SandboxSpec

    try:
        sb = api.make_sandbox(SandboxSpec(workspace.resolve()), backend, image)
    except api.ConfigError as exc:
        _fail(str(exc))
    try:
        sb.start()
        result = sb.exec(cmd, timeout=timeout)
        diff = sb.diff()
    except SandboxError as exc:
        _fail(str(exc))
    finally:
        sb.stop()
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    status = "timed out" if result.timed_out else f"exit code {result.exit_code}"
    err.print(f"[bold]{status}[/] in {result.duration_s:.2f}s", highlight=False)
    if diff.empty:
        err.print("no change to the workspace")
    else:
        err.print(
            f"changed: +{len(diff.added)} ~{len(diff.modified)} -{len(diff.deleted)}"
            + (f" (binary: {', '.join(diff.binary)})" if diff.binary else ""),
            highlight=False,
        )
        sys.stdout.write(diff.patch)
    raise typer.Exit(124 if result.timed_out else min(max(result.exit_code, 0), 255))


@sandbox_app.command("gc")
def sandbox_gc() -> None:
    """Remove sandboxes (processes, containers, mounts, state) left behind by a killed controller."""
    removed = api.gc_sandboxes()
    console.print(f"removed {len(removed)} sandbox(es)" + (f": {', '.join(removed)}" if removed else ""))


agents_app = typer.Typer(
    help="Agent harness adapters: list, install into the host cache, check.", no_args_is_help=True
)
app.add_typer(agents_app, name="agents")
AdaptersOpt = Annotated[
    Path | None, typer.Option("--adapters", help="A folder of extra adapter files, searched first.")
]


@agents_app.command("list")
def agents_list(adapters: AdaptersOpt = None) -> None:
    """Known adapters, their pinned versions and what the host cache holds."""
    table = Table("name", "protocol", "package", "pinned", "installed", "description")
    for a in api.list_agents(adapters):
        if "error" in a:
            table.add_row(a["name"], "[red]broken[/]", "", "", "", a["error"])
        else:
            table.add_row(
                a["name"],
                a["protocol"],
                a["package"],
                a["pinned"],
                ", ".join(a["installed"]) or "-",
                a["description"],
            )
    console.print(table)


@agents_app.command("install")
def agents_install(
    agent: Annotated[
        str, typer.Argument(help="NAME or NAME@VERSION (default: the adapter's pinned version).")
    ],
    adapters: AdaptersOpt = None,
) -> None:
    """Install an agent CLI into the host cache once (npm/pip); sandboxes mount it read-only."""
    try:
        path, fresh = api.install_agent(agent, adapters)
    except api.ConfigError as exc:
        _fail(str(exc))
    console.print(f"{'installed' if fresh else 'already installed'}: {path}", highlight=False)


@agents_app.command("check")
def agents_check(
    agent: Annotated[str, typer.Argument(help="NAME or NAME@VERSION.")],
    sandbox: Annotated[str, typer.Option(help="local or docker.")] = "local",
    image: Annotated[str | None, typer.Option(help="Docker image (docker backend).")] = None,
    adapters: AdaptersOpt = None,
) -> None:
    """Run the CLI in a sandbox against the oracle on a tiny task: OK (exit 0) or what broke (exit 1)."""
    try:
        ok, lines = api.check_agent(agent, sandbox=sandbox, image=image, adapters_dir=adapters)
    except api.ConfigError as exc:
        _fail(str(exc))
    for line in lines:
        style = "green" if line == "OK" else "red" if line.startswith("FAILED") else ""
        console.print(f"[{style}]{line}[/]" if style else line, highlight=False, soft_wrap=True)
    raise typer.Exit(0 if ok else 1)


@app.command(context_settings={"allow_interspersed_args": True})
def run(
    tasks: Annotated[
        list[Path], typer.Argument(help="Harbor task folders, folders of tasks, SWE-bench files.")
    ],
    agent: Annotated[str, typer.Option(help="Adapter NAME[@VERSION] (harnessproxy agents list).")],
    upstream: Annotated[
        str, typer.Option(help="Upstream base URL, or 'oracle' (runs each task's solution).")
    ],
    model: Annotated[
        str | None, typer.Option(help="Model name sent upstream (default: the adapter's).")
    ] = None,
    n: Annotated[int, typer.Option("-n", help="Rollouts per task.")] = 1,
    concurrency: Annotated[int, typer.Option("-c", "--concurrency", help="Rollouts at once.")] = 4,
    sandbox: Annotated[str, typer.Option(help="local (bubblewrap) or docker.")] = "local",
    db: DbOpt = Path("runs.duckdb"),
    run_id: Annotated[str | None, typer.Option(help="Name of this run (default: generated).")] = None,
    resume: Annotated[
        bool, typer.Option(help="Finish run --run-id: only rollouts with no result run.")
    ] = False,
    runs_dir: Annotated[Path, typer.Option(help="Where run journals, calls and artifacts go.")] = Path(
        "harnessproxy-runs"
    ),
    image: Annotated[str | None, typer.Option(help="Docker image for every task (docker backend).")] = None,
    upstream_key_env: Annotated[
        str | None, typer.Option(help="Host env var with the upstream key (never enters a sandbox).")
    ] = None,
    agent_command: Annotated[str | None, typer.Option(help="The command adapter's shell command.")] = None,
    repos: Annotated[
        Path | None, typer.Option(help="SWE-bench: folder of local repo clones (owner__name).")
    ] = None,
    adapters: AdaptersOpt = None,
) -> None:
    """Run every task x N rollouts of an agent, score each in a fresh sandbox, load it all into DuckDB."""
    from harnessproxy.progress import LiveProgress

    try:
        with LiveProgress(console) as live:
            report = api.run(
                tasks,
                agent,
                upstream,
                n=n,
                concurrency=concurrency,
                sandbox=sandbox,
                db=db,
                model=model,
                run_id=run_id,
                resume=resume,
                runs_dir=runs_dir,
                image=image,
                upstream_key_env=upstream_key_env,
                agent_command=agent_command,
                repos=repos,
                adapters_dir=adapters,
                on_progress=live.update,
            )
    except api.ConfigError as exc:
        _fail(str(exc))
    for problem in report.task_errors:
        err.print(f"[yellow]skipped:[/] {problem}", highlight=False, soft_wrap=True)
    rows = report.summary
    if rows:
        columns = list(rows[0])
        table = Table(*columns, title=f"run {report.result.run_id}")
        for row in rows:
            table.add_row(
                *(f"{v:.2f}" if isinstance(v, float) else str(v) for v in (row.get(c, "") for c in columns))
            )
        console.print(table)
    console.print(
        f"{sum(r['n'] for r in rows)} rollouts in {db}  ·  next: harnessproxy sql --db {db} "
        '"SELECT * FROM task_summary"',
        highlight=False,
        soft_wrap=True,
    )


@app.command()
def version() -> None:
    """Print the harnessproxy version."""
    console.print(__version__)


if __name__ == "__main__":
    app()
