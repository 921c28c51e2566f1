#!/usr/bin/env bash
# The container tools the image tests need, from Debian's packages (CI reaches no other source):
#   podman + runc     build and run the trainer images (tfchart build, tfchart local --engine podman)
#   debootstrap       assemble the local stand-in base images (scripts/build_base_image.sh)
#   docker-registry   a real OCI registry for the push/pull round trip (distribution 2.8)
#   netavark, aardvark-dns  podman's network backend with DNS, so pods find each other by name
# and .tools/containers.conf, the podman settings that work inside this kind of sandbox (a
# container on a hybrid-cgroup host): runc instead of crun ("cgroups in hybrid mode not
# supported"), cgroupfs, no default ulimits ("setrlimit RLIMIT_NOFILE: Operation not permitted").
# The Makefile points CONTAINERS_CONF at that file and sets BUILDAH_ISOLATION=chroot for builds; a
# normal workstation needs neither.
# Fails loudly (exit 1) when a tool cannot be had: the image tests must never skip in CI.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TOOLS="${TFD_TOOLS_DIR:-$ROOT/.tools}"
mkdir -p "$TOOLS"
log() { printf 'install_containers: %s\n' "$*" >&2; }

declare -A PACKAGE_OF=([podman]=podman [runc]=runc [debootstrap]=debootstrap [docker-registry]=docker-registry
  [/usr/lib/podman/netavark]=netavark [/usr/lib/podman/aardvark-dns]=aardvark-dns)
missing=()
for tool in podman runc debootstrap docker-registry /usr/lib/podman/netavark /usr/lib/podman/aardvark-dns; do
  command -v "$tool" >/dev/null || missing+=("${PACKAGE_OF[$tool]}")
done
if ((${#missing[@]})); then
  if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
    log "FAILED: missing ${missing[*]}; install them (Debian/Ubuntu: sudo apt-get install ${missing[*]})"
    exit 1
  fi
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${missing[@]}" uidmap slirp4netns containernetworking-plugins \
    >"$TOOLS/apt.log" 2>&1 || { tail -20 "$TOOLS/apt.log" >&2; log "FAILED: apt-get install"; exit 1; }
fi

cat >"$TOOLS/containers.conf" <<'EOF'
# Written by scripts/install_containers.sh (CONTAINERS_CONF points here in the Makefile).
[containers]
default_ulimits = []

[network]
# netavark + aardvark-dns: the run's network resolves pod names (CNI without dnsname does not)
network_backend = "netavark"
# not CNI's 10.88.0.0/16: a cni-podman0 bridge left by a podman run without this file keeps a route
# to that subnet, and published ports (podman run -p) would then answer "No route to host"
default_subnet = "10.90.0.0/16"

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF

# CNI's default bridge, left by a podman run without this configuration, shadows a netavark network
# on the same subnet; an unused one goes (a bridge with ports attached is someone's: kept).
if ip link show cni-podman0 >/dev/null 2>&1 && [[ -z "$(ls /sys/class/net/cni-podman0/brif 2>/dev/null)" ]]; then
  log "removing the unused CNI bridge cni-podman0 (its route shadows netavark's networks)"
  ip link delete cni-podman0 || log "could not remove cni-podman0 (not root?); published ports may not answer"
fi

if ! CONTAINERS_CONF="$TOOLS/containers.conf" podman info >/dev/null 2>"$TOOLS/podman-info.err"; then
  cat "$TOOLS/podman-info.err" >&2
  log "FAILED: podman is installed but does not work (podman info, output above)"
  exit 1
fi
log "podman $(podman version --format '{{.Client.Version}}'), runc, debootstrap, docker-registry ready"
