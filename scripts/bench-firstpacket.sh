#!/usr/bin/env bash
# bench-firstpacket.sh: first-packet TCP connect latency to a ClusterIP at 100 and
# 10,000 services, nftables and iptables proxy modes side by side in one run (issue 19:
# nftables latency(10,000)/latency(100) <= 1.1, iptables' ratio beside it).
#
# Network safety: BenchmarkFirstPacket creates its own namespaces (mkt-latency-*: a node
# running the proxier, a client and a backend per mode and size, joined by veths made
# inside the node namespace) and removes them when it ends, also on failure. Nothing is
# created in, or sent from, the root namespace.
#
# Usage: sudo scripts/bench-firstpacket.sh
#   env: FIRSTPACKET_SIZES=100,10000  FIRSTPACKET_SAMPLES=400 (per mode and size)
#        FIRSTPACKET_WARMUP=20 (discarded rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench-firstpacket: must run as root" >&2; exit 1; }
echo "# $(nproc) CPUs; load before: $(cut -d' ' -f1-3 /proc/loadavg); kernel $(uname -r)"
exec go test -run '^$' -bench BenchmarkFirstPacket -benchtime 1x -v -timeout 2h ./test/proxy/
