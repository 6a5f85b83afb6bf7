#!/usr/bin/env bash
# bench-ui.sh: minikit ui's first render and update latency in a real headless
# Chromium (test/ui BenchmarkUI), at 3 nodes x 30 pods and 5 nodes x 200 pods
# (the pods of one Deployment, spread over the nodes), each scaled up by 10.
# Needs root (labs) and Debian's chromium (scripts/deps.sh).
#   scripts/bench-ui.sh            # both sizes
#   scripts/bench-ui.sh 3 30       # one size: NODES PODS
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "bench-ui.sh needs root (it brings up labs): sudo $0 $*" >&2; exit 1; }
[ -x /usr/bin/chromium ] || { echo "bench-ui.sh drives Debian's chromium: run scripts/deps.sh first" >&2; exit 1; }
sizes=("3 30" "5 200")
[ $# -eq 2 ] && sizes=("$1 $2")
for s in "${sizes[@]}"; do
  set -- $s
  echo "=== minikit ui: $1 nodes x $2 pods"
  MINIKIT_BENCH_UI_NODES=$1 MINIKIT_BENCH_UI_PODS=$2 MINIKIT_BENCH_UI_ADD=10 \
    go test ./test/ui/ -run '^$' -bench '^BenchmarkUI$' -benchtime 1x -timeout 30m -v 2>&1 |
    grep -E '^(Benchmark|    bench_test|ok|FAIL|---)|first render|update:|reference|render durations|lab:' || true
done
