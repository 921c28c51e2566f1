#!/usr/bin/env bash
# Local stand-ins for the official base images, for machines that reach no container registry (CI
# here reaches PyPI, Debian and npm only).
#
#   build_base_image.sh [python] [tensorflow]      (no argument: python)
#
# python      -> $BASE_IMAGE (default localhost/tf-distributed/python-base:3.11-slim-bookworm), the
#                stand-in for python:3.11-slim-bookworm, Dockerfile.cpu's default base: Debian bookworm
#                minbase by debootstrap with python3 (3.11), pip and CA certificates. No TensorFlow:
#                the CPU image installs tensorflow-cpu itself (images/requirements-cpu.txt).
# tensorflow  -> $TENSORFLOW_BASE_IMAGE (default localhost/tf-distributed/tensorflow-base:2.21.0), the
#                stand-in for tensorflow/tensorflow:2.21.0: the python stand-in + `pip install
#                tensorflow==2.21.0`, exactly what the official image's Python carries. It stands in
#                for Dockerfile.gpu's default base tensorflow/tensorflow:2.21.0-gpu less its CUDA
#                libraries (no GPU here), for the bring-your-own example's base, and it is the base of
#                the image recipe before issue 26 that bench/image_builds.py compares against.
# Each is imported into the container engine; the trainer images are then built on them with
# --build-arg BASE_IMAGE=... (see docs/images.md).
#
# Package downloads inside the root use this machine's CA bundle and a pip.conf that names it
# (behind a TLS-inspecting proxy, pip fails with certificate errors without them). Nothing else of
# this machine goes into the images. Idempotent: an image whose label matches this script's inputs is
# kept (the tensorflow stamp includes the python one, so a new python stand-in rebuilds it). Needs root
# (debootstrap, chroot).
set -euo pipefail

ENGINE="${ENGINE:-podman}"
BASE_IMAGE="${BASE_IMAGE:-localhost/tf-distributed/python-base:3.11-slim-bookworm}"
TENSORFLOW_BASE_IMAGE="${TENSORFLOW_BASE_IMAGE:-localhost/tf-distributed/tensorflow-base:2.21.0}"
PYTHON_OFFICIAL="python:3.11-slim-bookworm"
TENSORFLOW_VERSION="2.21.0"
SUITE="bookworm"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PACKAGES="python3,python3-pip,ca-certificates"
PYTHON_STAMP="$(printf '%s\n' "$SUITE" "$PACKAGES" "python-v3" | sha256sum | cut -c1-16)"
TENSORFLOW_STAMP="$(printf '%s\n' "$PYTHON_STAMP" "$TENSORFLOW_VERSION" "tensorflow-v2" | sha256sum | cut -c1-16)"
STAMP_LABEL="io.tf-distributed.base-stamp"
STANDS_IN_LABEL="io.tf-distributed.stands-in-for"

log() { printf 'build_base_image: %s\n' "$*" >&2; }
fail() { log "FAILED: $*"; exit 1; }

want_python=0 want_tensorflow=0
for target in "${@:-python}"; do
  case "$target" in
    python) want_python=1 ;;
    tensorflow) want_python=1 want_tensorflow=1 ;;  # the tensorflow stand-in is built on the python one
    *) fail "unknown base '$target' (python, tensorflow)" ;;
  esac
done

command -v "$ENGINE" >/dev/null || fail "$ENGINE is not installed (apt-get install podman runc)"

up_to_date() {  # image stamp
  local existing
  existing="$("$ENGINE" image inspect --format "{{index .Config.Labels \"$STAMP_LABEL\"}}" "$1" 2>/dev/null || true)"
  [[ "$existing" == "$2" ]]
}

build_python_base() {
  command -v debootstrap >/dev/null || fail "debootstrap is not installed (apt-get install debootstrap)"
  [[ "$(id -u)" == 0 ]] || fail "debootstrap and chroot need root: run as root (CI runs as root)"
  local work root started=$SECONDS
  work="$(mktemp -d "${TMPDIR:-/var/tmp}/tfd-base.XXXXXX")"
  # shellcheck disable=SC2064  # $work is fixed now
  trap "umount '$work/root/proc' 2>/dev/null || true; rm -rf '$work'" EXIT
  root="$work/root"

  log "debootstrap $SUITE minbase with $PACKAGES"
  debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$root" "$MIRROR" >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; fail "debootstrap failed (log above)"; }

  if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
    cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
  fi
  # The official images let `pip install` write to the system Python; bookworm marks it externally
  # managed, so the pip.conf below says what the official images do by default (like them, it leaves
  # pip's cache on: the Dockerfiles turn it off with PIP_NO_CACHE_DIR).
  cat >"$root/etc/pip.conf" <<'EOF'
[global]
cert = /etc/ssl/certs/ca-certificates.crt
break-system-packages = true
disable-pip-version-check = true
EOF
  chroot "$root" /usr/bin/env -i PATH=/usr/bin:/bin python3 -c "import sys; assert sys.version_info[:2] == (3, 11)" \
    || fail "the assembled root's python3 is not 3.11 (what $PYTHON_OFFICIAL carries)"
  ln -sf python3 "$root/usr/bin/python"
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/root/.cache
  : >"$root/etc/resolv.conf"

  log "import into $ENGINE as $BASE_IMAGE"
  tar -C "$root" -c . | "$ENGINE" import \
    --change "LABEL $STAMP_LABEL=$PYTHON_STAMP" \
    --change "LABEL $STANDS_IN_LABEL=$PYTHON_OFFICIAL" \
    --change "LABEL org.opencontainers.image.description=local stand-in for $PYTHON_OFFICIAL" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["python3"]' - "$BASE_IMAGE" >/dev/null
  rm -rf "$work"
  trap - EXIT
  log "$BASE_IMAGE done in $((SECONDS - started)) s"
}

build_tensorflow_base() {
  local work started=$SECONDS
  work="$(mktemp -d "${TMPDIR:-/var/tmp}/tfd-base.XXXXXX")"
  # shellcheck disable=SC2064
  trap "rm -rf '$work'" EXIT
  # the official image's recipe (tensorflow/tools/dockerfiles): its Python + `pip install tensorflow`
  cat >"$work/Containerfile" <<EOF
FROM $BASE_IMAGE
RUN python3 -m pip install -q --no-cache-dir tensorflow==$TENSORFLOW_VERSION \\
    && python3 -c "import tensorflow as tf; assert tf.__version__ == '$TENSORFLOW_VERSION'"
LABEL $STAMP_LABEL=$TENSORFLOW_STAMP \\
      $STANDS_IN_LABEL=tensorflow/tensorflow:$TENSORFLOW_VERSION \\
      org.opencontainers.image.description="local stand-in for tensorflow/tensorflow:$TENSORFLOW_VERSION"
EOF
  log "pip install tensorflow==$TENSORFLOW_VERSION on $BASE_IMAGE -> $TENSORFLOW_BASE_IMAGE"
  # --network host: the build's pip reaches PyPI as this machine does (chroot isolation in CI)
  "$ENGINE" build -q --format docker --network host -f "$work/Containerfile" -t "$TENSORFLOW_BASE_IMAGE" "$work" \
    >"$work/build.log" 2>&1 || { tail -20 "$work/build.log" >&2; fail "building $TENSORFLOW_BASE_IMAGE failed"; }
  rm -rf "$work"
  trap - EXIT
  log "$TENSORFLOW_BASE_IMAGE done in $((SECONDS - started)) s"
}

if ((want_python)); then
  if up_to_date "$BASE_IMAGE" "$PYTHON_STAMP"; then log "$BASE_IMAGE is up to date"; else build_python_base; fi
fi
if ((want_tensorflow)); then
  if up_to_date "$TENSORFLOW_BASE_IMAGE" "$TENSORFLOW_STAMP"; then
    log "$TENSORFLOW_BASE_IMAGE is up to date"
  else
    build_tensorflow_base
  fi
fi
