#!/usr/bin/env bash
# All set-up on a fresh Debian 12 machine: Debian packages (python3-venv, git, bubblewrap), then a virtualenv
# (.venv) with harnessproxy and its dev tools (pytest, the official anthropic/openai SDKs used as real
# clients, ruff). Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
need=()
command -v python3 >/dev/null 2>&1 || need+=(python3)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
command -v git >/dev/null 2>&1 || need+=(git)
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)  # the local sandbox
command -v nsenter >/dev/null 2>&1 || need+=(util-linux)
if [ ${#need[@]} -gt 0 ]; then
    echo "setup: installing Debian packages: ${need[*]}"
    $SUDO apt-get update -qq
    $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

python3 - <<'PY'
import sys
if sys.version_info < (3, 11):
    sys.exit(f"setup: harnessproxy needs Python >= 3.11, this python3 is {sys.version.split()[0]}")
PY

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e ".[dev]"
echo "setup: ready ($(.venv/bin/harnessproxy version))"
