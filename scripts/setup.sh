#!/usr/bin/env bash
# Installs everything the project needs into the checkout (nothing global):
#   .venv/            the project (tfchart + trainer extra + dev tools), pinned in pyproject.toml
#   .tools/checkov/   checkov in its own venv (its pins clash with ours)
#   .tools/node/      @bitnami/readme-generator-for-helm (README parameter table)
#   .tools/helm3, .tools/helm4   real helm 3.17 and helm 4.1 (scripts/install_helm.sh)
#   .tools/kubectl/kubectl       kubectl 1.35, for the docs' `kubectl wait` tests (scripts/install_kubectl.sh)
# and, from Debian's packages, podman & co. (scripts/install_containers.sh) and the Prometheus server
# of the metrics test (scripts/install_prometheus.sh; its service is never started).
# Idempotent: each part is skipped when its stamp matches the pins.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
TOOLS="$ROOT/.tools"
PYTHON="${PYTHON:-python3}"
CHECKOV_VERSION="3.3.30"
README_GENERATOR_VERSION="2.7.2"
mkdir -p "$TOOLS"

log() { printf 'setup: %s\n' "$*" >&2; }
need() { command -v "$1" >/dev/null || { log "FAILED: '$1' is required but not on PATH ($2)"; exit 1; }; }
need "$PYTHON" "install Python 3.10-3.13"
need npm "install Node.js 18+ with npm (e.g. apt-get install nodejs npm)"

# pip prints a warning for each configured-but-absent local index; keep the log readable.
quiet_pip() { "$@" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true; test "${PIPESTATUS[0]}" -eq 0; }

stamp_ok() { [[ -f "$1" && "$(cat "$1")" == "$2" ]]; }

py_stamp="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if ! stamp_ok .venv/.stamp "$py_stamp"; then
  log "python environment (.venv) from pyproject.toml pins"
  [[ -x .venv/bin/python ]] || "$PYTHON" -m venv .venv
  quiet_pip .venv/bin/python -m pip install -q --disable-pip-version-check --config-settings editable_mode=compat -e ".[trainer,dev]"
  echo "$py_stamp" > .venv/.stamp
fi

# scikit-learn's digits set (the offline --dataset=digits of `make run`) is not in the repository: taken from the
# pinned scikit-learn wheel on PyPI into trainer/datasets/ (once; trainer/datasets/fetch_digits.py).
digits="$(.venv/bin/python trainer/datasets/fetch_digits.py)"
log "$digits"

# TensorFlow Serving's protos, to check the rendered model config as the model server parses it. The
# package names `tensorflow` (the venv has the same release as tensorflow-cpu): installed without deps.
SERVING_API_VERSION=2.21.0
if ! stamp_ok .venv/.serving-api-stamp "$SERVING_API_VERSION"; then
  log "tensorflow-serving-api $SERVING_API_VERSION (its protos; --no-deps)"
  quiet_pip .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps \
    "tensorflow-serving-api==$SERVING_API_VERSION"
  echo "$SERVING_API_VERSION" > .venv/.serving-api-stamp
fi

if ! stamp_ok "$TOOLS/checkov/.stamp" "$CHECKOV_VERSION"; then
  log "checkov $CHECKOV_VERSION (.tools/checkov)"
  [[ -x "$TOOLS/checkov/bin/python" ]] || "$PYTHON" -m venv "$TOOLS/checkov"
  quiet_pip "$TOOLS/checkov/bin/python" -m pip install -q --disable-pip-version-check "checkov==$CHECKOV_VERSION"
  echo "$CHECKOV_VERSION" > "$TOOLS/checkov/.stamp"
fi

if ! stamp_ok "$TOOLS/node/.stamp" "$README_GENERATOR_VERSION"; then
  log "readme-generator-for-helm $README_GENERATOR_VERSION (.tools/node)"
  mkdir -p "$TOOLS/node"
  npm install --silent --no-audit --no-fund --prefix "$TOOLS/node" \
    "@bitnami/readme-generator-for-helm@$README_GENERATOR_VERSION" >/dev/null
  echo "$README_GENERATOR_VERSION" > "$TOOLS/node/.stamp"
fi

bash scripts/install_helm.sh
bash scripts/install_kubectl.sh
bash scripts/install_containers.sh
bash scripts/install_prometheus.sh

for tool in .venv/bin/tfchart "$TOOLS/checkov/bin/checkov" "$TOOLS/node/node_modules/.bin/readme-generator" \
  "$TOOLS/helm3/helm" "$TOOLS/helm4/helm" /usr/bin/prometheus; do
  [[ -x "$tool" ]] || { log "FAILED: $tool missing after set-up"; exit 1; }
done
log "ready"
