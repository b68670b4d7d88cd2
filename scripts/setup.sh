#!/usr/bin/env bash
# All set-up on a fresh Debian 12 machine: Debian packages (python3-venv, git, bubblewrap, docker.io,
# busybox-static, nodejs, npm), a virtualenv (.venv) with harnessproxy and its dev tools (pytest, the official
# anthropic/openai SDKs used as real clients, ruff), and a running docker engine. Safe to re-run.
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
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)  # the docker sandbox
command -v npm >/dev/null 2>&1 || need+=(nodejs npm)  # agent CLIs come from the npm registry
# the docker tests' base image is made here from a static busybox (no registry is reachable)
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q "ok installed" || need+=(busybox-static)
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
# A docker engine for the docker sandbox: start one if none answers. No bridge and no iptables: sandboxes run
# with --network none and reach nothing but their own proxy.
engine_up() { .venv/bin/python -c 'import docker; docker.from_env(timeout=5).ping()' >/dev/null 2>&1; }
if ! engine_up; then
    if [ "$(id -u)" -eq 0 ]; then
        echo "setup: starting dockerd (--bridge=none --iptables=false)"
        setsid -f dockerd --bridge=none --iptables=false >/tmp/harnessproxy-dockerd.log 2>&1
        for _ in $(seq 1 60); do engine_up && break; sleep 0.5; done
        engine_up || echo "setup: dockerd did not come up (see /tmp/harnessproxy-dockerd.log); docker tests will skip"
    else
        echo "setup: no docker engine answers and this is not root: docker tests will skip"
    fi
fi
echo "setup: ready ($(.venv/bin/harnessproxy version))"
