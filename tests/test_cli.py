"""`harnessproxy` as a user runs it: a subprocess, driven over HTTP, then its DuckDB read."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anthropic
import duckdb
import openai
import pytest

from harnessproxy.proxy.scripted import ScriptedUpstream
from tests.test_proxy_failures import closed_port

CLI = [sys.executable, "-m", "harnessproxy.cli"]


def run_cli(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})}
    )


@pytest.fixture
async def scripted() -> ScriptedUpstream:
    up = ScriptedUpstream()
    await up.start()
    yield up
    await up.stop()


async def test_proxy_subprocess_records_into_duckdb(scripted: ScriptedUpstream, tmp_path: Path) -> None:
    port = closed_port()
    db = tmp_path / "runs.duckdb"
    proc = subprocess.Popen(
        [
            *CLI,
            "proxy",
            "--listen",
            f"127.0.0.1:{port}",
            "--upstream",
            scripted.url,
            "--upstream-key-env",
            "HP_KEY",
            "--rollout-id",
            "cli-rollout",
            "--db",
            str(db),
            "--journal-dir",
            str(tmp_path / "j"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HP_KEY": "sk-host"},
    )
    try:
        line = proc.stdout.readline()
        assert f"listening on http://127.0.0.1:{port}" in line, line + proc.stderr.read()
        url = f"http://127.0.0.1:{port}"
        claude = anthropic.AsyncAnthropic(base_url=url, api_key="sk-dummy", max_retries=0)
        async with claude.messages.stream(
            model="anthropic_tool_use", max_tokens=9, messages=[{"role": "user", "content": "hi"}]
        ) as s:
            await s.get_final_message()
        oai = openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-dummy", max_retries=0)
        await oai.chat.completions.create(model="chat_text", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.APIStatusError):
            await oai.chat.completions.create(
                model="x@status=503", messages=[{"role": "user", "content": "hi"}]
            )
    finally:
        proc.send_signal(signal.SIGTERM)
        out, errs = proc.communicate(timeout=30)
    assert proc.returncode == 0, errs
    assert "loaded 3 call(s)" in out
    assert scripted.requests[0]["headers"]["x-api-key"] == "sk-host"
    con = duckdb.connect(str(db), read_only=True)
    rows = con.execute(
        "SELECT seq, rollout_id, protocol, stream, status, stop_reason, output_tokens, error_kind, "
        "response_body->>'$.content[1].input.command' FROM llm_calls ORDER BY seq"
    ).fetchall()
    assert rows == [
        (1, "cli-rollout", "anthropic", True, 200, "tool_use", 5, None, "echo hi > x.txt"),
        (2, "cli-rollout", "openai_chat", False, 200, "stop", 6, None, None),
        (3, "cli-rollout", "openai_chat", False, 503, None, None, "upstream_status", None),
    ]


def test_missing_key_env_is_a_sentence(tmp_path: Path) -> None:
    r = run_cli(
        "proxy", "--upstream", "http://127.0.0.1:9", "--upstream-key-env", "HP_NOPE_UNSET", cwd=tmp_path
    )
    assert r.returncode == 2
    assert "HP_NOPE_UNSET is not set" in r.stderr and "Traceback" not in r.stderr


def test_bad_listen_is_a_sentence(tmp_path: Path) -> None:
    r = run_cli("proxy", "--upstream", "http://127.0.0.1:9", "--listen", "nonsense", cwd=tmp_path)
    assert r.returncode == 2 and "HOST:PORT" in r.stderr and "Traceback" not in r.stderr


def test_demo_then_sql(tmp_path: Path) -> None:
    r = run_cli("demo", "--db", "d.duckdb", cwd=tmp_path, env={"COLUMNS": "200"})
    assert r.returncode == 0, r.stderr
    assert "agent's dummy key dropped): yes" in r.stdout
    r = run_cli(
        "sql",
        "--db",
        "d.duckdb",
        "-f",
        "json",
        "SELECT protocol, kind, stream, status FROM llm_calls ORDER BY seq",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [
        {"protocol": "anthropic", "kind": "main", "stream": True, "status": 200},
        {"protocol": "anthropic", "kind": "main", "stream": False, "status": 200},
        {"protocol": "anthropic", "kind": "count_tokens", "stream": False, "status": 200},
        {"protocol": "openai_chat", "kind": "main", "stream": True, "status": 200},
        {"protocol": "openai_responses", "kind": "main", "stream": True, "status": 200},
    ]
    r = run_cli("sql", "--db", "d.duckdb", "-f", "csv", "SELECT count(*) AS n FROM llm_calls", cwd=tmp_path)
    assert r.stdout.split() == ["n", "5"]


def test_bad_query_prints_duckdb_message_not_traceback(tmp_path: Path) -> None:
    r = run_cli("sql", "--db", "x.duckdb", "SELEKT nope", cwd=tmp_path)
    assert r.returncode == 2
    assert "syntax error" in r.stderr.lower() and "Traceback" not in r.stderr


def test_ingest_is_idempotent_and_survives_a_torn_line(tmp_path: Path) -> None:
    r = run_cli("demo", "--db", "d.duckdb", "--journal-dir", "j", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    journal = next((tmp_path / "j").glob("*.jsonl"))
    with journal.open("a") as fh:
        fh.write('{"call_id": "torn", "rollout')  # a crash mid-append
    r = run_cli("ingest", str(journal), "--db", "fresh.duckdb", cwd=tmp_path)
    assert "loaded 5 new call(s)" in r.stdout, r.stderr
    r = run_cli("ingest", str(journal), "--db", "fresh.duckdb", cwd=tmp_path)
    assert "loaded 0 new call(s)" in r.stdout
    r = run_cli("ingest", "nope.jsonl", cwd=tmp_path)
    assert r.returncode == 2 and "no such journal" in r.stderr


def test_help_lists_commands(tmp_path: Path) -> None:
    r = run_cli("--help", cwd=tmp_path, env={"COLUMNS": "200"})
    for command in ("proxy", "ingest", "sql", "demo", "version"):
        assert command in r.stdout


def test_store_keeps_request_body_verbatim(tmp_path: Path) -> None:
    from harnessproxy.proxy.record import CallRecord
    from harnessproxy.store import connect, load_records

    rec = CallRecord("r", 1, "POST", "/v1/messages", "anthropic", "main")
    body = '{ "model" :"m",\n  "messages": [] }'
    rec.request = {"headers": {}, "body": body, "body_encoding": "utf-8"}
    rec.ended_at = rec.started_at + 0.25
    con = connect(tmp_path / "s.duckdb")
    assert load_records(con, [json.loads(rec.to_json())]) == 1
    got, dur = con.execute("SELECT request_body::VARCHAR, duration_ms FROM llm_calls").fetchone()
    assert got == body and dur == pytest.approx(250, abs=1)
