#!/usr/bin/env bash
# Creates (once) a Python virtualenv with grpcio, grpcio-tools and
# grpcio-health-checking, used by the tests as a gRPC client not written in
# Rust, and prometheus-client, whose text parser reads the runner's /metrics.
# Prints the path of the venv's python on stdout.
#
# Usage: scripts/setup-python-client.sh [VENV_DIR]
# Default VENV_DIR: ${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/python-venv
set -euo pipefail

venv="${1:-${KRM_FN_CACHE:-$HOME/.cache/krm-fn-runner}/python-venv}"
packages=(grpcio==1.85.1 grpcio-tools==1.85.1 grpcio-health-checking==1.85.1 prometheus-client==0.26.0)
stamp="$venv/.krm-fn-runner-stamp"

if [[ -f "$stamp" && "$(cat "$stamp")" == "${packages[*]}" && -x "$venv/bin/python" ]]; then
  echo "$venv/bin/python"
  exit 0
fi

python=${PYTHON:-python3}
if ! "$python" -m venv "$venv" >&2; then
  echo "error: '$python -m venv' failed; install python3-venv (apt-get install python3-venv)" >&2
  exit 1
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "${packages[@]}" >&2
echo "${packages[*]}" > "$stamp"
echo "$venv/bin/python"
