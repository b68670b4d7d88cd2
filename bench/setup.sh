#!/usr/bin/env bash
# Optional: the two proxies the benchmark compares against, each in its own virtualenv (they pin conflicting
# dependencies). LiteLLM must be newer than 1.82.8 (1.82.7 and 1.82.8 were compromised releases).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv-litellm/bin/litellm ] || { python3 -m venv .venv-litellm && .venv-litellm/bin/pip install -q 'litellm[proxy]>1.82.8'; }
[ -x .venv-mitm/bin/mitmdump ] || { python3 -m venv .venv-mitm && .venv-mitm/bin/pip install -q 'mitmproxy==11.0.2'; }
echo "litellm $(.venv-litellm/bin/pip show litellm | awk '/^Version/{print $2}'), mitmproxy $(.venv-mitm/bin/pip show mitmproxy | awk '/^Version/{print $2}')"
