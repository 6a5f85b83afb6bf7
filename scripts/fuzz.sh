#!/usr/bin/env bash
# Runs every fuzz target for a bounded time each (default 5m locally; CI's plain
# `go test` runs only their seed corpora). Prints executions per target and
# fails if any target finds a crash (go test writes the input to the package's
# testdata/fuzz/ for a regression seed).
#
#   scripts/fuzz.sh [--time 30s] [TARGET...]     e.g. scripts/fuzz.sh --time 60s FuzzRender
#
# As root, FuzzRender also checks rules with iptables-restore --test inside a
# network namespace it creates and removes.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin
time=5m
only=()
while [ $# -gt 0 ]; do
  case "$1" in
    --time) time=$2; shift 2 ;;
    --time=*) time=${1#--time=}; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) only+=("$1"); shift ;;
  esac
done
# package:target, one per fuzz function in the repository.
targets=(
  ./apiserver:FuzzDecodeAndValidate
  ./proxy:FuzzRender
  ./dns:FuzzRequest
  ./ingress/config:FuzzRoute
  ./ingress/proxy:FuzzRequestHead
  ./ingress/proxy:FuzzChunked
)
# A fuzz function nobody listed here would never run long: refuse.
listed=$(printf '%s\n' "${targets[@]}" | sed 's/.*://' | sort)
found=$(grep -rhoE '^func Fuzz[A-Za-z0-9_]+' --include='*_test.go' . | sed 's/^func //' | sort)
if [ "$listed" != "$found" ]; then
  echo "fuzz.sh: the target list differs from the Fuzz functions in the tree:" >&2
  diff <(echo "$listed") <(echo "$found") >&2 || true
  exit 1
fi
status=0
summary=()
for t in "${targets[@]}"; do
  pkg=${t%%:*} fn=${t##*:}
  if [ ${#only[@]} -gt 0 ] && ! printf '%s\n' "${only[@]}" | grep -qx "$fn"; then
    continue
  fi
  echo "== $fn ($pkg) for $time"
  log=$(mktemp)
  set +e
  go test -run '^$' -fuzz "^${fn}\$" -fuzztime "$time" "$pkg" 2>&1 | tee "$log" | grep -vE 'gathering baseline|elapsed: .*\(0/sec\)'
  rc=${PIPESTATUS[0]}
  set -e
  execs=$(grep -oE 'execs: [0-9]+' "$log" | tail -1 | awk '{print $2}' || true)
  if [ "$rc" = 0 ]; then
    summary+=("$fn: ${execs:-0} executions in $time, no failure")
  else
    summary+=("$fn: FAILED after ${execs:-?} executions (see above; the input is under $pkg/testdata/fuzz/$fn)")
    status=1
  fi
  rm -f "$log"
done
echo
echo "== fuzz summary"
printf '%s\n' "${summary[@]}"
exit $status
