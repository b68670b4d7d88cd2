"""The host cache of agent CLIs: installed once per version, mounted read-only into every sandbox.

Sandboxes never install anything (they have no network). An install goes to a temporary folder and is renamed
into place only when complete, with a marker, so a second install of the same version is a no-op and a killed
install leaves nothing that looks finished."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from harnessproxy.agents.spec import Adapter, AdapterError

MARKER = ".harnessproxy-install.json"


def cache_root() -> Path:
    return Path(
        os.environ.get("HARNESSPROXY_AGENT_CACHE") or Path.home() / ".cache" / "harnessproxy" / "agents"
    )


def install_dir(adapter: Adapter, version: str | None = None, root: Path | None = None) -> Path:
    return (root or cache_root()) / adapter.name / (version or adapter.install.version or "none")


def installed_versions(adapter: Adapter, root: Path | None = None) -> list[str]:
    base = (root or cache_root()) / adapter.name
    return sorted(p.name for p in base.glob("*") if (p / MARKER).is_file()) if base.is_dir() else []


def find_install(adapter: Adapter, version: str | None = None, root: Path | None = None) -> Path:
    """The installed folder to mount, or a clear error saying how to install it."""
    if not adapter.needs_install():
        return Path()
    d = install_dir(adapter, version, root)
    if not (d / MARKER).is_file():
        v = version or adapter.install.version
        raise AdapterError(
            f"agent {adapter.name}@{v} is not installed in {d.parent}: run `harnessproxy agents install "
            f"{adapter.name}@{v}`"
        )
    return d


def _npm(adapter: Adapter, version: str, into: Path) -> list[str]:
    npm = shutil.which("npm")
    if npm is None:
        raise AdapterError(f"installing {adapter.name} needs npm (Debian: apt-get install npm)")
    spec = f"{adapter.install.package}@{version}"
    return [
        npm,
        "install",
        "--silent",
        "--no-audit",
        "--no-fund",
        "--prefix",
        str(into),
        spec,
        *adapter.install.extra_packages,
    ]


def _pip(adapter: Adapter, version: str, into: Path) -> list[str]:
    # The sandbox runs the host's python3 with PYTHONPATH={agent_dir}/lib: install for that interpreter.
    spec = f"{adapter.install.package}=={version}"
    extra = adapter.install.extra_packages
    return [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(into / "lib"), spec, *extra]


def install(adapter: Adapter, version: str | None = None, root: Path | None = None) -> tuple[Path, bool]:
    """Install into the host cache; (folder, whether anything was installed)."""
    if not adapter.needs_install():
        return Path(), False
    version = version or adapter.install.version or ""
    final = install_dir(adapter, version, root)
    if (final / MARKER).is_file():
        return final, False
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{version}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    argv = (_npm if adapter.install.kind == "npm" else _pip)(adapter, version, tmp)
    started = time.monotonic()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise AdapterError(f"installing {adapter.name}@{version} took over 15 minutes") from exc
    if done.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        tail = (done.stderr or done.stdout).strip()[-800:]
        raise AdapterError(f"installing {adapter.name}@{version} failed: {tail}")
    meta = {"adapter": adapter.name, "package": adapter.install.package, "version": version}
    meta["seconds"] = round(time.monotonic() - started, 1)
    (tmp / MARKER).write_text(json.dumps(meta) + "\n")
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return final, True
