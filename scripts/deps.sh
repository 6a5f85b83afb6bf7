#!/usr/bin/env bash
# Installs what minikit's demo and tests need on a Debian/Ubuntu machine (Go is assumed).
set -euo pipefail
need=()
command -v iptables-restore >/dev/null || need+=(iptables)
# nft: the nftables proxy mode's Exec backend and the oracle its Netlink backend is tested against.
command -v nft >/dev/null || need+=(nftables)
command -v ip >/dev/null || need+=(iproute2)
command -v dig >/dev/null || need+=(dnsutils)
command -v curl >/dev/null || need+=(curl)
command -v nsenter >/dev/null || need+=(util-linux)
command -v ping >/dev/null || need+=(iputils-ping)
command -v kubectl >/dev/null || need+=(kubernetes-client)
# The conformance run: its script reads JSON and JUnit with python3; the upstream
# specs run nc (OpenBSD flavour, as in their images) and curl in pods.
command -v python3 >/dev/null || need+=(python3)
command -v nc >/dev/null || need+=(netcat-openbsd)
# The ui's browser test (test/ui) drives Debian's Chromium headless through chromedp.
[ -x /usr/bin/chromium ] || need+=(chromium)
# examples/pod-network captures the VXLAN packets on the underlay; scripts/bench-podnet.sh
# measures pod-to-pod throughput.
command -v tcpdump >/dev/null || need+=(tcpdump)
command -v iperf3 >/dev/null || need+=(iperf3)
# scripts/pictures.sh (and TestPictures, which runs it) waits on trace and kubectl JSON with jq.
command -v jq >/dev/null || need+=(jq)
# test/provision: `vagrant validate` on the Vagrantfile, and scripts/provision.sh
# run in a fresh Debian 12 root that debootstrap makes.
command -v vagrant >/dev/null || need+=(vagrant)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v unzip >/dev/null || need+=(unzip)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  if ! apt-get install -y -qq "${need[@]}" >/dev/null; then
    # kubernetes-client is not in every release; everything else is required.
    rest=()
    for p in "${need[@]}"; do [ "$p" = kubernetes-client ] || rest+=("$p"); done
    [ ${#rest[@]} -eq 0 ] || apt-get install -y -qq "${rest[@]}" >/dev/null
  fi
fi
# nginx is the Ingress benchmark's peer and checks the nginx.conf minikit renders
# (nginx -t). It is installed without starting its service.
if ! command -v nginx >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; trap 'rm -f /usr/sbin/policy-rc.d' EXIT; }
  apt-get update -qq
  apt-get install -y -qq nginx >/dev/null
fi
# Debian's kubectl 1.20 (package kubernetes-client) is the old SPDY-only client
# the streaming tests drive next to the current kubectl. It is extracted, not
# installed, so it never replaces /usr/bin/kubectl.
kubectl120=/var/cache/minikit/kubectl-1.20
if [ ! -x "$kubectl120/usr/bin/kubectl" ]; then
  export DEBIAN_FRONTEND=noninteractive
  tmp=$(mktemp -d)
  ( cd "$tmp" && { apt-get download kubernetes-client >/dev/null 2>&1 || { apt-get update -qq && apt-get download kubernetes-client >/dev/null 2>&1; }; } ) &&
    mkdir -p "$kubectl120" && dpkg-deb -x "$tmp"/kubernetes-client_*.deb "$kubectl120" ||
    echo "warning: could not extract Debian's kubernetes-client into $kubectl120" >&2
  rm -rf "$tmp"
fi
if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then
  export PATH=$PATH:/usr/local/go/bin
fi
command -v go >/dev/null || { echo "Go is required (https://go.dev/dl/)" >&2; exit 1; }
