#!/usr/bin/env bash
# The real Prometheus server for the metrics test (tests/e2e/test_prometheus.py), and its promtool for
# the alert tests (tests/chart/test_prometheusrule.py: `promtool check rules`, `promtool test rules`),
# from Debian's package `prometheus` (bookworm: 2.42.0+ds-5+deb12u1; CI reaches Debian, not GitHub's
# releases), which ships both.
# The test starts /usr/bin/prometheus itself, on a free loopback port with a scrape config of its
# own: the package's service must never run. Installing it would start it (its postinst calls
# invoke-rc.d), so the install runs under a policy-rc.d that forbids every service start
# (exit 101, invoke-rc.d's "action forbidden"); a policy-rc.d already on the machine is put back
# afterwards. --no-install-recommends keeps prometheus-node-exporter (and its service) out.
# The version is not pinned exactly: Debian's security updates replace the deb12uN revision in the
# archive, so an exact pin would stop installing; the test needs Prometheus 2.x (HTTP API v1,
# last_over_time), which is checked here.
# Idempotent: nothing is done when /usr/bin/prometheus and /usr/bin/promtool are there. Fails loudly
# (exit 1) when they cannot be had: the Prometheus and alert tests must never skip in CI.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TOOLS="${TFD_TOOLS_DIR:-$ROOT/.tools}"
PROMETHEUS=/usr/bin/prometheus
PROMTOOL=/usr/bin/promtool
mkdir -p "$TOOLS"
log() { printf 'install_prometheus: %s\n' "$*" >&2; }

if [[ ! -x "$PROMETHEUS" || ! -x "$PROMTOOL" ]]; then
  if [[ "$(id -u)" != 0 ]] || ! command -v apt-get >/dev/null; then
    log "FAILED: $PROMETHEUS or $PROMTOOL is missing; install them (Debian/Ubuntu: sudo apt-get install --no-install-recommends prometheus, then stop its service)"
    exit 1
  fi
  policy=/usr/sbin/policy-rc.d
  saved=""
  if [[ -e "$policy" ]]; then
    saved="$(mktemp "$TOOLS/policy-rc.d.XXXXXX")"
    cp -p "$policy" "$saved"
  fi
  restore() {
    if [[ -n "$saved" ]]; then cp -p "$saved" "$policy" && rm -f "$saved"; else rm -f "$policy"; fi
  }
  trap restore EXIT
  printf '#!/bin/sh\n# written by tf-distributed scripts/install_prometheus.sh for the install only\nexit 101\n' >"$policy"
  chmod 755 "$policy"
  log "apt-get install --no-install-recommends prometheus (its service is not started)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends prometheus >"$TOOLS/apt-prometheus.log" 2>&1 \
    || { tail -20 "$TOOLS/apt-prometheus.log" >&2; log "FAILED: apt-get install prometheus"; exit 1; }
  restore
  trap - EXIT
fi

version="$("$PROMETHEUS" --version 2>&1 | head -1)"
[[ "$version" =~ prometheus,\ version\ 2\. ]] \
  || { log "FAILED: $PROMETHEUS is not Prometheus 2.x ($version)"; exit 1; }
"$PROMTOOL" --version >/dev/null 2>&1 || { log "FAILED: $PROMTOOL does not run"; exit 1; }
log "${version%% (*} ready ($PROMETHEUS and $PROMTOOL; the test starts its own, the package's service stays stopped)"
