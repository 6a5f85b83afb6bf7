#!/usr/bin/env bash
# bench-proxy.sh: minikit's service proxy against the iptables-restore floor and
# against per-rule iptables, side by side in one run (issue 5).
#
# Network safety: everything runs inside one network namespace this script
# creates (minikit-bench-proxy-$$) and deletes on exit; the Go test refuses to
# touch iptables unless it runs inside that namespace. The root namespace's
# iptables are never touched.
#
# Usage: sudo scripts/bench-proxy.sh
#   env: SIZES=100,1000,10000  REPS (default 5 at 100, 3 at 1000, 1 at 10000), PARTIAL_REPS (9)
#        PERRULE_MAX=1000 (largest size also applied one iptables exec per rule)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench-proxy: must run as root" >&2; exit 1; }
NS=minikit-bench-proxy-$$
TMP=$(mktemp -d /tmp/bench-proxy.XXXXXX)
cleanup() { ip netns del "$NS" 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
go test -c -tags benchproxy -o "$TMP/proxy.test" ./proxy
ip netns add "$NS"
echo "# $(nproc) CPUs; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
MINIKIT_BENCH_NETNS=$NS ip netns exec "$NS" "$TMP/proxy.test" -test.run '^TestBenchProxy$' -test.v -test.timeout 2h |
  grep -v -E '^(=== RUN|--- PASS|PASS$)'
