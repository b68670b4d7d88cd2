"""pass@k, the unbiased estimator 1 - C(n-c, k) / C(n, k): the SQL macro and the Python twin both agree with
the binomial formula computed exactly."""

from __future__ import annotations

from math import comb

import duckdb
import pytest

from harnessproxy.api import pass_at_k
from harnessproxy.resources import recorder_sql

GRID = [(n, c, k) for n in range(1, 11) for c in range(n + 1) for k in range(1, n + 1)]


def exact(n: int, c: int, k: int) -> float:
    return 1.0 - comb(n - c, k) / comb(n, k)


def test_python_pass_at_k_is_the_binomial_formula() -> None:
    for n, c, k in GRID:
        assert pass_at_k(n, c, k) == pytest.approx(exact(n, c, k)), (n, c, k)


def test_sql_macro_is_the_binomial_formula() -> None:
    con = duckdb.connect()
    con.execute(recorder_sql("schema.sql"))
    got = con.execute(
        "SELECT n, c, k, pass_at_k(n, c, k) FROM (SELECT unnest(?) AS t) "
        ", LATERAL (SELECT t[1] AS n, t[2] AS c, t[3] AS k)",
        [[list(g) for g in GRID]],
    ).fetchall()
    assert len(got) == len(GRID)
    for n, c, k, value in got:
        assert value == pytest.approx(exact(n, c, k)), (n, c, k)
    assert con.execute("SELECT pass_at_k(3, 1, 5)").fetchone() == (None,)  # k > n: undefined
