#!/usr/bin/env bash
# A local stand-in for the official TensorFlow base image, for machines that reach no container
# registry (CI here reaches PyPI, Debian and npm only).
#
# The Dockerfiles default to BASE_IMAGE=tensorflow/tensorflow:2.21.0[-gpu]: an Ubuntu image whose
# Python carries exactly `pip install tensorflow==2.21.0`. This script assembles the same thing from
# parts that are reachable here and imports it into the container engine:
#   debootstrap --variant=minbase bookworm (python3, pip, CA certificates)
#   + pip install tensorflow==2.21.0 inside that root
#   -> `<engine> import` as $BASE_IMAGE (default localhost/tf-distributed/tensorflow-base:2.21.0)
# The trainer images are then built on it with --build-arg BASE_IMAGE=... (see docs/images.md).
#
# Package downloads inside the root use this machine's CA bundle and a pip.conf that names it
# (behind a TLS-inspecting proxy, pip fails with certificate errors without them). Nothing else of
# this machine goes into the image. Idempotent: an image whose label matches this script's inputs is
# kept. Needs root (debootstrap, chroot).
set -euo pipefail

ENGINE="${ENGINE:-podman}"
BASE_IMAGE="${BASE_IMAGE:-localhost/tf-distributed/tensorflow-base:2.21.0}"
TENSORFLOW_VERSION="2.21.0"
SUITE="bookworm"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
PACKAGES="python3,python3-pip,ca-certificates"
STAMP="$(printf '%s\n' "$SUITE" "$PACKAGES" "$TENSORFLOW_VERSION" "v1" | sha256sum | cut -c1-16)"
STAMP_LABEL="io.tf-distributed.base-stamp"

log() { printf 'build_base_image: %s\n' "$*" >&2; }
fail() { log "FAILED: $*"; exit 1; }

command -v "$ENGINE" >/dev/null || fail "$ENGINE is not installed (apt-get install podman runc)"
command -v debootstrap >/dev/null || fail "debootstrap is not installed (apt-get install debootstrap)"
[[ "$(id -u)" == 0 ]] || fail "debootstrap and chroot need root: run as root (CI runs as root)"

existing="$("$ENGINE" image inspect --format "{{index .Config.Labels \"$STAMP_LABEL\"}}" "$BASE_IMAGE" 2>/dev/null || true)"
if [[ "$existing" == "$STAMP" ]]; then
  log "$BASE_IMAGE is up to date"
  exit 0
fi

work="$(mktemp -d "${TMPDIR:-/var/tmp}/tfd-base.XXXXXX")"
trap 'umount "$work/root/proc" 2>/dev/null || true; rm -rf "$work"' EXIT
root="$work/root"
started=$SECONDS

log "debootstrap $SUITE minbase with $PACKAGES"
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$root" "$MIRROR" >"$work/debootstrap.log" 2>&1 \
  || { tail -20 "$work/debootstrap.log" >&2; fail "debootstrap failed (log above)"; }

if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
fi
cp /etc/resolv.conf "$root/etc/resolv.conf"
# The official image lets `pip install` write to the system Python; bookworm marks it externally
# managed, so the pip.conf below says what the official image does by default.
cat >"$root/etc/pip.conf" <<'EOF'
[global]
cert = /etc/ssl/certs/ca-certificates.crt
break-system-packages = true
no-cache-dir = true
disable-pip-version-check = true
EOF

log "pip install tensorflow==$TENSORFLOW_VERSION"
mount -t proc proc "$root/proc"
# env -i: none of this machine's pip settings (PIP_* variables, local package folders) leak in
in_root() { chroot "$root" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"; }
in_root python3 -m pip install -q "tensorflow==$TENSORFLOW_VERSION" \
  || fail "pip install tensorflow==$TENSORFLOW_VERSION failed in the chroot"
in_root python3 -c "import tensorflow as tf; assert tf.__version__ == '$TENSORFLOW_VERSION'" \
  || fail "tensorflow does not import in the assembled root"
umount "$root/proc"
ln -sf python3 "$root/usr/bin/python"
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/root/.cache "$root/etc/resolv.conf"
: >"$root/etc/resolv.conf"

log "import into $ENGINE as $BASE_IMAGE"
tar -C "$root" -c . | "$ENGINE" import \
  --change "LABEL $STAMP_LABEL=$STAMP" \
  --change "LABEL org.opencontainers.image.description=local stand-in for tensorflow/tensorflow:$TENSORFLOW_VERSION" \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["python3"]' - "$BASE_IMAGE" >/dev/null
log "done in $((SECONDS - started)) s"
