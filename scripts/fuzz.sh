#!/usr/bin/env bash
# Runs every fuzz target for a bounded budget each and fails if any target finds
# a failing input (go test writes it to the package's testdata/fuzz/ as a
# regression seed). Prints executions per target.
#
#   scripts/fuzz.sh [--time 5m|--time 50000x|--ci] [TARGET...]
#       e.g. scripts/fuzz.sh --time 60s FuzzRender
#
# --time takes a duration (default 5m) or an execution count (Nx) for every
# target. --ci gives each target its own execution count, sized to about 10 s
# here (what scripts/test.sh runs). CI uses counts, not durations: with a
# duration, Go 1.26's fuzz coordinator can report a bare "context deadline
# exceeded" when the deadline races a worker's last input (go.dev/issue/75804);
# a count has no deadline to race. A duration run that ends that way, with no
# failing input written, is reported as such and not counted as a finding.
# --ci also bounds the minimization of each new input to 1000 executions:
# with Go's default (60 s per input, also for inputs that merely add coverage)
# the workers of FuzzDecodeAndValidate stood still for minutes minimizing the
# dozens of new inputs the API's coverage yields (171 s here and 345 s in CI
# for 20000 executions; 26 s with the bound). A failing input is still saved,
# minimized less.
#
# As root, FuzzRender and FuzzRenderPolicies also check rules with
# iptables-restore --test inside a
# network namespace it creates and removes.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin
time=5m
ci=false
only=()
while [ $# -gt 0 ]; do
  case "$1" in
    --time) time=$2; shift 2 ;;
    --time=*) time=${1#--time=}; shift ;;
    --ci) ci=true; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) only+=("$1"); shift ;;
  esac
done
# package:target:CI execution count, one per fuzz function in the repository.
targets=(
  ./internal/apiserver:FuzzDecodeAndValidate:20000x
  ./internal/kubeproxy:FuzzRender:10000x
  ./internal/nft:FuzzCompile:250000x
  ./internal/netpol:FuzzRenderPolicies:2000x
  ./internal/dns:FuzzRequest:100000x
  ./internal/ingress/config:FuzzRoute:50000x
  ./internal/ingress/httpproxy:FuzzRequestHead:100000x
  ./internal/ingress/httpproxy:FuzzChunked:80000x
)
# A fuzz function nobody listed here would never run long: refuse.
listed=$(printf '%s\n' "${targets[@]}" | cut -d: -f2 | sort)
found=$(grep -rhoE '^func Fuzz[A-Za-z0-9_]+' --include='*_test.go' . | sed 's/^func //' | sort)
if [ "$listed" != "$found" ]; then
  echo "fuzz.sh: the target list differs from the Fuzz functions in the tree:" >&2
  diff <(echo "$listed") <(echo "$found") >&2 || true
  exit 1
fi
# inputs lists the failing inputs saved for a target (committed ones included).
inputs() { ls "$1/testdata/fuzz/$2" 2>/dev/null | sort || true; }
status=0
summary=()
for t in "${targets[@]}"; do
  IFS=: read -r pkg fn count <<<"$t"
  if [ ${#only[@]} -gt 0 ] && ! printf '%s\n' "${only[@]}" | grep -qx "$fn"; then
    continue
  fi
  budget=$time
  minimize=()
  $ci && budget=$count && minimize=(-fuzzminimizetime 1000x)
  echo "== $fn ($pkg) for $budget"
  log=$(mktemp)
  before=$(inputs "$pkg" "$fn")
  start=$(date +%s)
  set +e
  go test -run '^$' -fuzz "^${fn}\$" -fuzztime "$budget" "${minimize[@]}" "$pkg" 2>&1 | tee "$log" | grep -vE 'gathering baseline|elapsed: .*\(0/sec\)'
  rc=${PIPESTATUS[0]}
  set -e
  took=$(( $(date +%s) - start ))
  execs=$(grep -oE 'execs: [0-9]+' "$log" | tail -1 | awk '{print $2}' || true)
  new=$(comm -13 <(echo "$before") <(inputs "$pkg" "$fn"))
  if [ "$rc" = 0 ]; then
    summary+=("$fn: ${execs:-0} executions in ${took}s, no failure")
  elif [ -z "$new" ] && [[ "$budget" != *x ]] && grep -q 'context deadline exceeded' "$log" \
      && ! grep -qE '^\s*(panic|[a-z_]+_test\.go:[0-9]+:)' "$log"; then
    summary+=("$fn: ${execs:-0} executions in ${took}s, no failing input (the run ended on Go's fuzztime race, go.dev/issue/75804)")
  else
    summary+=("$fn: FAILED after ${execs:-?} executions (see above; the input is under $pkg/testdata/fuzz/$fn${new:+: $new})")
    status=1
  fi
  rm -f "$log"
done
echo
echo "== fuzz summary"
printf '%s\n' "${summary[@]}"
exit $status
