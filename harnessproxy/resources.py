"""Locate the declarative data folders (adapters/, recorder/) both in a checkout and in an installed wheel."""

from __future__ import annotations

from pathlib import Path

_PKG = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """The shipped folder `name`: in the wheel under harnessproxy/_data, in a checkout at the repo root."""
    for candidate in (_PKG / "_data" / name, _PKG.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"harnessproxy data folder {name!r} is missing from this installation")


def recorder_sql(filename: str) -> str:
    return (data_dir("recorder") / filename).read_text()


GOLDENS = _PKG / "goldens"
