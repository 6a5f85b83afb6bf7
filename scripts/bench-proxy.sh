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
#        takes ~17 minutes, see docs/measurements.md; nftables: kube-proxy has no
#        canary, so its full sync is its first one, and minikit's is timed after its table is deleted)
#
#        sudo scripts/bench-proxy.sh --nft-vs REF
# the nftables mode's syncs (BenchmarkNFTSync: first full, full again, partial after one endpoint
# changed, partial after an endpoint count changed) of this tree against git REF (e.g. main),
# in one run: both test binaries built (REF's proxy package with this tree's nft_bench_test.go, so
# both time the same cases), then run in turn ROUNDS times, each in network namespaces of its own
# that the benchmark creates and removes; prints each case's median per tree and this/REF.
#   env: NFT_BENCH (default 'BenchmarkNFTSync/netlink/services=10000/') ROUNDS=3 BENCHTIME=20x
#
#        sudo scripts/bench-proxy.sh --ip-family dual
# dual-stack against single-stack (issue 33), per proxy mode, in one run inside one namespace this
# script creates and deletes: S ClusterIP services x 5 endpoints, single-stack (one IPv4 proxier)
# and dual-stack (each service with an IPv4 and an IPv6 ClusterIP and an EndpointSlice of each
# family; one proxier per family as MetaProxier runs them, both syncing concurrently); first full
# sync into empty tables and partial sync after one pod's endpoint changed (in both families'
# slices when dual); prints medians (min-max) and dual/single ratios.
#   env: MODES=iptables,nftables  SIZES=1000,10000  REPS (3; 1 at 10000)  PARTIAL_REPS (9)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench-proxy: must run as root" >&2; exit 1; }
if [ "${1:-}" = --nft-vs ]; then
  REF=${2:?usage: bench-proxy.sh --nft-vs REF}
  TMP=$(mktemp -d /tmp/bench-proxy.XXXXXX)
  cleanup() { git worktree remove --force "$TMP/ref" 2>/dev/null || true; rm -rf "$TMP"; }
  trap cleanup EXIT
  trap 'exit 130' INT TERM HUP
  git worktree add -q --detach "$TMP/ref" "$REF"
  refpkg=internal/kubeproxy   # the proxy's package in REF: proxy/ before the layout of issue 23
  [ -d "$TMP/ref/$refpkg" ] || refpkg=proxy
  cp internal/kubeproxy/nft_bench_test.go "$TMP/ref/$refpkg/nft_bench_test.go"
  if [ "$refpkg" = proxy ]; then
    # REF's packages still had their old paths and names (docs/architecture.md, Layout).
    sed -i -e "s/^package kubeproxy\$/package proxy/" \
      -e 's#"github.com/minikit/minikit/internal/netns"#netns "github.com/minikit/minikit/sandbox"#' \
      -e 's#"github.com/minikit/minikit/internal/nft"#"github.com/minikit/minikit/proxy/nft"#' \
      "$TMP/ref/$refpkg/nft_bench_test.go"
  fi
  (cd "$TMP/ref" && go test -c -o "$TMP/ref.test" "./$refpkg")
  go test -c -o "$TMP/this.test" ./internal/kubeproxy
  BENCH=${NFT_BENCH:-BenchmarkNFTSync/netlink/services=10000/}
  echo "# $(nproc) CPUs; load before: $(cut -d' ' -f1-3 /proc/loadavg); this tree $(git rev-parse --short HEAD) vs $REF ($(git rev-parse --short "$REF")); $BENCH, ${ROUNDS:-3} rounds of ${BENCHTIME:-20x}"
  for r in $(seq "${ROUNDS:-3}"); do
    for which in ref this; do
      (cd internal/kubeproxy && "$TMP/$which.test" -test.run '^$' -test.bench "$BENCH" -test.benchtime "${BENCHTIME:-20x}" -test.timeout 2h) |
        awk -v w="$which" '/^Benchmark/ { sub(/-[0-9]+$/, "", $1); print w, $1, $3 }' >>"$TMP/results"
    done
  done
  awk '
    function median(list,   n, a, i, j, t) {
      n = split(list, a, " ")
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    { v[$1, $2] = v[$1, $2] " " $3; if (!($2 in seen)) { seen[$2] = 1; order[++n] = $2 } }
    END {
      printf "%-60s %12s %12s %8s\n", "case", "REF ms", "this ms", "this/REF"
      for (i = 1; i <= n; i++) {
        c = order[i]; a = median(v["ref", c]) / 1e6; b = median(v["this", c]) / 1e6
        printf "%-60s %12.2f %12.2f %8.2f\n", c, a, b, (a > 0 ? b / a : 0)
      }
    }' "$TMP/results"
  exit 0
fi
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
BENCH_TEST=TestBenchProxy
if [ "${1:-}" = --ip-family ]; then
  case "${2:-}" in
    dual) BENCH_TEST=TestBenchDualStack ;;
    single) ;;
    *) echo "bench-proxy: --ip-family single|dual" >&2; exit 2 ;;
  esac
fi
NS=minikit-bench-proxy-$$
TMP=$(mktemp -d /tmp/bench-proxy.XXXXXX)
cleanup() { ip netns del "$NS" 2>/dev/null || true; rm -rf "$TMP"; }
trap cleanup EXIT
trap 'exit 130' INT TERM HUP
go test -c -tags benchproxy -o "$TMP/proxy.test" ./internal/kubeproxy
ip netns add "$NS"
echo "# $(nproc) CPUs; load before: $(cut -d' ' -f1-3 /proc/loadavg)"
MINIKIT_BENCH_NETNS=$NS ip netns exec "$NS" "$TMP/proxy.test" -test.run "^$BENCH_TEST\$" -test.v -test.timeout 2h |
  grep -v -E '^(=== RUN|--- PASS|PASS$)'
