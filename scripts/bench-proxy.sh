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
#
#        sudo scripts/bench-proxy.sh --upstream
# minikit's proxy against upstream kube-proxy v1.37.2 itself (issue 19 part 4), per mode, in one
# run: a one-node lab (minikit's proxy on node1, in node1's namespace) and kube-proxy, built by
# scripts/build-upstream-proxy.sh, in a namespace of its own (mkt-parity-bench-*) that mirrors
# node1's addresses and reaches the lab's API through loopback; S ClusterIP services x 5
# endpoints; full sync duration and EndpointSlice change -> rules in the kernel, read from both
# proxies' own metrics (kubeproxy_sync_full_proxy_rules_duration_seconds,
# kubeproxy_network_programming_duration_seconds, kubeproxy_sync_partial_proxy_rules_duration_seconds),
# printed with minikit/upstream ratios. Both namespaces are removed at the end.
#   env: MODES=iptables,nftables  SIZES=1000,10000  CHANGES=7  RESYNC_MAX=1000 (sizes up to which kube-proxy's full
#        resync is timed too: with iptables-nft 1.8.9 its --noflush restore of 10,000 services
#        takes ~17 minutes, see /work/shared/bench/ipt-floor.sh; nftables: kube-proxy has no
#        canary, so its full sync is its first one, and minikit's is timed after its table is deleted)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench-proxy: must run as root" >&2; exit 1; }
if [ "${1:-}" = --upstream ]; then
  KUBE_PROXY=$(scripts/build-upstream-proxy.sh)
  TMP=$(mktemp -d /tmp/bench-proxy.XXXXXX)
  trap 'rm -rf "$TMP"' EXIT
  go test -c -tags benchupstream -o "$TMP/upstreamproxy.test" ./test/upstreamproxy
  echo "# $(nproc) CPUs; load before: $(cut -d' ' -f1-3 /proc/loadavg); $("$KUBE_PROXY" --version 2>&1 | head -1) built from k8s.io/kubernetes@v1.37.2"
  echo "# modes ${MODES:-iptables,nftables}"
  (cd test/upstreamproxy && KUBE_PROXY=$KUBE_PROXY "$TMP/upstreamproxy.test" -test.run '^TestBenchUpstream$' -test.v -test.timeout 4h) |
    grep -v -E '^(=== RUN|--- PASS|PASS$)'
  exit "${PIPESTATUS[0]}"
fi
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
