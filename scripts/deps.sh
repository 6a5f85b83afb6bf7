#!/usr/bin/env bash
# Installs what minikit needs on a Debian/Ubuntu machine (Go is assumed), by purpose:
#
#   scripts/deps.sh              # the tour (scripts/tour.sh): what its examples run, about 20 packages
#   scripts/deps.sh conformance  # the tour's, plus what scripts/conformance.sh reads and runs in pods
#   scripts/deps.sh test         # the conformance set, plus the test-only tools (scripts/test.sh), about 110
#
# Only what is missing is installed, always with --no-install-recommends: no tier
# installs a hypervisor, a kernel or a desktop. Prints the count it installed.
set -euo pipefail
purpose=${1:-tour}
case $purpose in tour | conformance | test) ;; *) echo "usage: $0 [tour|conformance|test]" >&2; exit 2 ;; esac
need=()
want() { # want COMMAND-OR-PATH PACKAGE: the package when the command is missing
  case $1 in
  /*) [ -e "$1" ] || need+=("$2") ;;
  *) command -v "$1" >/dev/null || need+=("$2") ;;
  esac
}
# The tour: the lab itself (ip, iptables-restore, nft, nsenter) and what the
# examples' check.sh run (dig, curl, ping, tcpdump, openssl, kubectl).
want iptables-restore iptables
# nft: the nftables proxy mode's Exec backend and `nft list` in the examples.
want nft nftables
want ip iproute2
want dig dnsutils
want curl curl
# The first `go build` fetches modules from the Go proxy over HTTPS: a fresh
# Debian (debootstrap minbase, a cloud image) has no CA bundle.
want /etc/ssl/certs/ca-certificates.crt ca-certificates
want nsenter util-linux
want ping iputils-ping
want openssl openssl
# examples/pod-network captures the VXLAN packets on the underlay.
want tcpdump tcpdump
want kubectl kubernetes-client
if [ "$purpose" != tour ]; then
  # The conformance run: its script reads JSON and JUnit with python3; the upstream
  # specs run nc (OpenBSD flavour, as in their images) and curl in pods.
  want python3 python3
  want nc netcat-openbsd
fi
if [ "$purpose" = test ]; then
  # The ui's browser test (test/ui) drives Debian's Chromium headless through chromedp.
  want /usr/bin/chromium chromium
  # scripts/bench-podnet.sh measures pod-to-pod throughput.
  want iperf3 iperf3
  # scripts/pictures.sh (and TestPictures, which runs it) waits on trace and kubectl JSON with jq.
  want jq jq
  # test/provision: `vagrant validate` on the Vagrantfile (the package alone: no
  # provider, so no QEMU or libvirt), and scripts/provision.sh run in a fresh
  # Debian 12 root that debootstrap makes.
  want vagrant vagrant
  want debootstrap debootstrap
  want unzip unzip
fi
export DEBIAN_FRONTEND=noninteractive
updated=
update() { [ -n "$updated" ] || { apt-get update -qq; updated=1; }; }
before=$(dpkg-query -W -f '${db:Status-Status}\n' 2>/dev/null | grep -c '^installed$' || true)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing for the $purpose: ${need[*]}"
  update
  if ! apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null; then
    # kubernetes-client is not in every release; everything else is required.
    rest=()
    for p in "${need[@]}"; do [ "$p" = kubernetes-client ] || rest+=("$p"); done
    [ ${#rest[@]} -eq 0 ] || apt-get install -y -qq --no-install-recommends "${rest[@]}" >/dev/null
    command -v kubectl >/dev/null || echo "warning: no kubectl: install it (https://kubernetes.io/docs/tasks/tools/)" >&2
  fi
fi
if [ "$purpose" = test ]; then
  # nginx is the Ingress benchmark's peer and checks the nginx.conf minikit renders
  # (nginx -t). It is installed without starting its service.
  if ! command -v nginx >/dev/null; then
    [ -e /usr/sbin/policy-rc.d ] || { printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; trap 'rm -f /usr/sbin/policy-rc.d' EXIT; }
    update
    apt-get install -y -qq --no-install-recommends nginx >/dev/null
  fi
  # Debian's kubectl 1.20 (package kubernetes-client) is the old SPDY-only client
  # the streaming tests drive next to the current kubectl. It is extracted, not
  # installed, so it never replaces /usr/bin/kubectl.
  kubectl120=/var/cache/minikit/kubectl-1.20
  if [ ! -x "$kubectl120/usr/bin/kubectl" ]; then
    tmp=$(mktemp -d)
    ( cd "$tmp" && { apt-get download kubernetes-client >/dev/null 2>&1 || { apt-get update -qq && apt-get download kubernetes-client >/dev/null 2>&1; }; } ) &&
      mkdir -p "$kubectl120" && dpkg-deb -x "$tmp"/kubernetes-client_*.deb "$kubectl120" ||
      echo "warning: could not extract Debian's kubernetes-client into $kubectl120" >&2
    rm -rf "$tmp"
  fi
fi
after=$(dpkg-query -W -f '${db:Status-Status}\n' 2>/dev/null | grep -c '^installed$' || true)
[ "$after" = "$before" ] || echo "deps.sh ($purpose): installed $((after - before)) packages"
if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then
  export PATH=$PATH:/usr/local/go/bin
fi
command -v go >/dev/null || { echo "Go is required (https://go.dev/dl/)" >&2; exit 1; }
