"""Shell text built on the host to run inside a sandbox."""

from __future__ import annotations


def heredoc(command: str, body: str, mark: str = "HARNESSPROXY_EOF") -> str:
    """`command <<'MARK'` followed by `body` verbatim: quoted, so nothing in it is expanded, and a marker the
    body does not contain."""
    while mark in body:
        mark += "_"
    text = body if body.endswith("\n") else body + "\n"
    return f"{command} <<'{mark}'\n{text}{mark}\n"
