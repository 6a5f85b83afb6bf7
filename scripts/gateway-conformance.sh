#!/usr/bin/env bash
# The Gateway API conformance suite (sigs.k8s.io/gateway-api/conformance
# v1.6.3), unmodified, against a minikit lab.
#
#   sudo ./scripts/gateway-conformance.sh                   # GATEWAY-HTTP, the features the GatewayClass claims
#   sudo ./scripts/gateway-conformance.sh --core-features --profiles GATEWAY-GRPC  # the profile's core features, claimed or not
#   sudo ./scripts/gateway-conformance.sh --run-test HTTPRouteSimpleSameNamespace
#   sudo ./scripts/gateway-conformance.sh --skip-tests GatewayInvalidTLSConfiguration,HTTPRouteInvalidCrossNamespaceBackendRef
#   sudo ./scripts/gateway-conformance.sh --supported-features Gateway,HTTPRoute,ReferenceGrant,HTTPRouteQueryParamMatching
#   sudo ./scripts/gateway-conformance.sh --all-features    # every feature of the profiles (extended tests too)
#   sudo ./scripts/gateway-conformance.sh --profiles GATEWAY-HTTP,GATEWAY-TLS
#   sudo ./scripts/gateway-conformance.sh --lab NAME        # use a running lab instead of making one
#   sudo ./scripts/gateway-conformance.sh -- --debug        # anything after -- goes to the suite
#   sudo ./scripts/gateway-conformance.sh --skip-readiness NAMESPACE/GATEWAY
#       # DIAGNOSTIC, not conformance: the setup does not wait for that base Gateway
#
# It builds minikit and the suite's test binary (test/gatewayconformance, build
# tag gatewayconformance, `go test -c`), brings up a two-node lab (whose servers
# install the CRD bundle and the GatewayClass minikit, and whose LoadBalancer
# pool gives each Gateway an address), and runs the suite INSIDE the lab's
# client host network namespace with a kubeconfig for the API's lab address:
# the suite sends its requests straight to each Gateway's status address, as a
# student's curl from the client host does, and every packet stays in the lab.
# --gateway-class=minikit always; --conformance-profiles (default
# GATEWAY-HTTP). The supported features are, by default, what the
# GatewayClass minikit says in status.supportedFeatures (the features whose
# tests pass): the script waits for the class to say them, then lets the suite
# read them itself (its report says source Inferred); with --run-test the
# suite does not read the class, so the script passes the class's list as
# --supported-features. --core-features takes the profiles' core features
# instead (to try a profile the class does not claim yet); --supported-features
# and --all-features name them outright. Tests marked parallel run --procs at
# a time (go test -test.parallel, default 2).
#
# It writes the suite's log (gateway-conformance.log) and its conformance report
# (report.yaml) to --report-dir (default /tmp/minikit-gateway-conformance),
# prints one line per test (PASS/FAIL/SKIP, seconds, why), the totals, and
# removes the lab it made, also on failure or Ctrl-C. SKIP counts tests the
# suite skipped for a feature outside --supported-features separately from
# tests skipped by --run-test/--skip-tests. Exit status 0 only when no test
# failed. Run as root.
#
# GATEWAY-HTTP core passes: `sudo ./scripts/gateway-conformance.sh`
# runs its setup (every base Gateway, the HTTPS-only one too, Accepted and
# Programmed) and 36 of 36 core tests pass; with --profiles
# GATEWAY-HTTP,GATEWAY-GRPC the GRPC profile's 14 core tests pass too, and
# with --profiles GATEWAY-TLS that profile's 19 (TLSRoute is in the standard
# channel the lab installs), with --profiles GATEWAY-TCP,GATEWAY-UDP the 8
# TCPRoute and 9 UDPRoute tests (TCPRoute and UDPRoute are v1 in the v1.6.3
# standard channel too: no experimental CRDs needed; UDPRouteNotAllowedByListeners
# only checks something when TLSRoute is supported, which the class claims). A profile's setup may wait for a base Gateway
# whose listeners minikit does not serve yet:
# --skip-readiness NAMESPACE/NAME[,...] gives those base Gateways the suite's
# own opt-out annotation (gateway-api/skip-this-for-readiness) so the rest runs:
# a diagnostic of what passes, never a conformance result (the summary says so).
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root: sudo $0" >&2; exit 1; }
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

PROFILES=GATEWAY-HTTP FEATURES='' ALL='' CORE='' RUN='' SKIPTESTS='' SKIPREADY=''
LAB='' NODES=2 REPORT=/tmp/minikit-gateway-conformance TIMEOUT=90m PROXY_MODE=iptables PROCS=${CONFORMANCE_PROCS:-2}
EXTRA=()
while [ $# -gt 0 ]; do
  case $1 in
    --profiles|--conformance-profiles) PROFILES=$2; shift 2 ;;
    --supported-features) FEATURES=$2; shift 2 ;;
    --all-features) ALL=1; shift ;;
    --core-features) CORE=1; shift ;;
    --run-test) RUN=$2; shift 2 ;;
    --skip-tests) SKIPTESTS=$2; shift 2 ;;
    --skip-readiness) SKIPREADY=$2; shift 2 ;;
    --lab) LAB=$2; shift 2 ;;
    --nodes) NODES=$2; shift 2 ;;
    --proxy-mode) PROXY_MODE=$2; shift 2 ;;
    --report-dir) REPORT=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --procs) PROCS=$2; shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -n "$CORE" ] && [ -z "$FEATURES" ] && [ -z "$ALL" ]; then
  # Each profile's CoreFeatures (conformance/utils/suite/profiles.go).
  f=()
  for p in ${PROFILES//,/ }; do
    case $p in
      GATEWAY-HTTP) f+=(Gateway HTTPRoute ReferenceGrant) ;;
      GATEWAY-GRPC) f+=(Gateway GRPCRoute ReferenceGrant) ;;
      GATEWAY-TLS) f+=(Gateway TLSRoute ReferenceGrant) ;;
      GATEWAY-TCP) f+=(Gateway TCPRoute ReferenceGrant) ;;
      GATEWAY-UDP) f+=(Gateway UDPRoute ReferenceGrant) ;;
      *) echo "no core features known for profile $p: pass --supported-features" >&2; exit 2 ;;
    esac
  done
  FEATURES=$(printf '%s\n' "${f[@]}" | sort -u | paste -sd, -)
fi

START=$SECONDS
TMP=$(mktemp -d /tmp/minikit-gwconf.XXXXXX)
MINIKIT=${MINIKIT:-$TMP/minikit}
made=''
cleanup() {
  local rc=$?
  set +e
  trap - INT TERM
  if [ -n "$made" ]; then
    "$MINIKIT" lab down --name "$LAB" --dir "$TMP/lab" || { echo "minikit lab down --name $LAB failed" >&2; rc=1; }
  fi
  [ "${KEEP_TMP:-}" = 1 ] || rm -rf "$TMP"
  echo "gateway conformance run took $((SECONDS - START))s"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[ -x "$MINIKIT" ] || go build -o "$MINIKIT" ./cmd/minikit
SUITE=$TMP/gatewayconformance.test
go test -c -tags gatewayconformance -o "$SUITE" ./test/gatewayconformance/
if [ -z "$LAB" ]; then
  LAB=gwc$$
  made=1
  "$MINIKIT" lab up --name "$LAB" --nodes "$NODES" --proxy-mode "$PROXY_MODE" --dir "$TMP/lab" --kubeconfig-merge=false >"$TMP/lab-up.log" 2>&1 ||
    { cat "$TMP/lab-up.log"; exit 1; }
fi
status=$("$MINIKIT" lab status --name "$LAB" -o json)
field() { python3 -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$1" <<<"$status"; }
internal=$(field 'd["internalAPIServer"]')
kubeconfig=$(field 'd["kubeconfig"]')
pool=$(field 'd["loadBalancerPool"]')
netns=$(field '[h["netns"] for h in d["hosts"] if h["role"]=="client"][0]')
# The same credentials, addressed to the API where it listens inside the lab.
sed -E "s#^(\s*server:).*#\1 $internal#" "$kubeconfig" >"$TMP/kubeconfig"

mkdir -p "$REPORT"
rm -f "$REPORT/report.yaml"
version=$(git describe --always --dirty 2>/dev/null || echo dev)
sargs=(--kubeconfig="$TMP/kubeconfig" --gateway-class=minikit --conformance-profiles="$PROFILES"
  --report-output="$REPORT/report.yaml" --organization=minikit --project=minikit
  --url=https://github.com/minikit/minikit --version="$version" --contact=https://github.com/minikit/minikit/issues)
if [ -z "$FEATURES" ] && [ -z "$ALL" ]; then
  # What the GatewayClass claims, once its controller has said it.
  claimed=''
  for _ in $(seq 120); do
    claimed=$(kubectl --kubeconfig "$kubeconfig" get gatewayclass minikit \
      -o jsonpath='{range .status.supportedFeatures[*]}{.name}{","}{end}' 2>/dev/null || true)
    [ -z "$claimed" ] || break
    sleep 1
  done
  [ -n "$claimed" ] || { echo "GatewayClass minikit has no status.supportedFeatures after 120s" >&2; exit 1; }
  claimed=${claimed%,}
  echo "== GatewayClass minikit claims: $claimed"
  # The suite reads the class itself unless --run-test is given.
  [ -z "$RUN" ] || FEATURES=$claimed
fi
if [ -n "$ALL" ]; then sargs+=(--all-features); elif [ -n "$FEATURES" ]; then sargs+=(--supported-features="$FEATURES"); fi
[ -z "$RUN" ] || sargs+=(--run-test="$RUN")
[ -z "$SKIPTESTS" ] || sargs+=(--skip-tests="$SKIPTESTS")
[ -z "$SKIPREADY" ] || sargs+=(--minikit-skip-readiness="$SKIPREADY")
fdesc=${FEATURES:-from the GatewayClass}
[ -z "$ALL" ] || fdesc=all
echo "== gateway conformance in netns $netns against $internal (LB pool $pool), profiles $PROFILES, features $fdesc${RUN:+, only $RUN}, parallel $PROCS"
rc=0
t0=$SECONDS
ip netns exec "$netns" "$SUITE" -test.v -test.run '^TestConformance$' -test.timeout="$TIMEOUT" -test.parallel="$PROCS" \
  "${sargs[@]}" ${EXTRA[@]+"${EXTRA[@]}"} >"$REPORT/gateway-conformance.log" 2>&1 || rc=$?
echo "the suite ran for $((SECONDS - t0))s"
[ "${VERBOSE:-}" != 1 ] || cat "$REPORT/gateway-conformance.log"

# One line per test, from the suite's verbose log as test2json attributes it.
go tool test2json <"$REPORT/gateway-conformance.log" >"$TMP/events.json" || true
python3 - "$TMP/events.json" <<'EOF2' || rc=1
import json, re, sys
out, result, elapsed = {}, {}, {}
# test2json reads the times from the verbose log's own result lines.
secs = {}
for line in open(sys.argv[1]):
    try:
        e = json.loads(line)
    except ValueError:
        continue
    name = e.get("Test", "")
    if e.get("Action") == "output":
        out.setdefault(name, []).append(e.get("Output", ""))
        m = re.match(r"\s*--- (?:PASS|FAIL|SKIP): (\S+) \(([\d.]+)s\)", e.get("Output", ""))
        if m:
            secs[m.group(1)] = float(m.group(2))
    elif e.get("Action") in ("pass", "fail", "skip"):
        result[name], elapsed[name] = e["Action"], e.get("Elapsed", 0)

def why(name, verdict):
    text = "".join(out.get(name, []))
    if verdict == "skip":
        m = re.search(r"Skipping \S+: (.*)", text)
        return m.group(1).strip() if m else ""
    # testify's failure block (Messages:, else the Error: line after a
    # generic one) and the suite's last log line before it: what it waited
    # for and what it saw.
    msg = re.search(r"Messages:\s+(.*)", text)
    err = re.search(r"Error:\s+(.*)\n\s*(.*)", text)
    parts = [msg.group(1).strip()] if msg else [err.group(1).strip() + " " + err.group(2).strip()] if err else []
    seen = [m.group(2) for m in re.finditer(r"(\w+)\.go:\d+: \S+Z: (.*)", text) if m.group(1) != "apply"]
    if seen:
        parts.append("last seen: " + seen[-1].strip())
    if not parts:
        lines = [l.strip() for l in text.splitlines() if "FAIL" not in l and l.strip()]
        parts = lines[-1:]
    return " | ".join(parts)[:300]

counts = {"PASS": 0, "FAIL": 0, "SKIP": 0, "NOT SUPPORTED": 0}
top = result.get("TestConformance")
for name in sorted(result):
    # Subtests of subtests (a test's cases) are summarised by their test.
    if not name.startswith("TestConformance/") or name.count("/") != 1:
        continue
    verdict = {"pass": "PASS", "fail": "FAIL", "skip": "SKIP"}[result[name]]
    reason = "" if verdict == "PASS" else why(name, result[name])
    if verdict == "SKIP" and "suite does not support" in reason:
        verdict = "NOT SUPPORTED"
        counts[verdict] += 1
        continue
    counts[verdict] += 1
    if verdict == "SKIP" and "explicitly skipped" in reason:
        continue  # --run-test or --skip-tests: counted, not listed
    failed_cases = [n for n in result if n.startswith(name + "/") and result[n] == "fail"]
    if verdict == "FAIL" and failed_cases:
        reason = "; ".join(n[len(name) + 1:] + ": " + why(n, "fail") for n in sorted(failed_cases))[:600] or reason
    # A parallel test's own function returns at once; its time is its cases'.
    took = max([secs.get(name, 0)] + [secs.get(n, 0) for n in result if n.startswith(name + "/")])
    print(f'{verdict}  {took:7.1f}s  {name[len("TestConformance/"):]}' + (f" — {reason}" if reason else ""))
if not result:
    print("no test results: see the suite's log"); sys.exit(1)
if top == "fail" and counts["FAIL"] == 0:
    print("FAIL  the suite itself (setup): " + why("TestConformance", "fail"))
    counts["FAIL"] += 1
print(f'{counts["PASS"]} passed, {counts["FAIL"]} failed, {counts["SKIP"]} skipped (--run-test/--skip-tests), '
      f'{counts["NOT SUPPORTED"]} not run (features outside --supported-features)')
sys.exit(1 if counts["FAIL"] or counts["PASS"] == 0 else 0)
EOF2
[ -z "$SKIPREADY" ] || echo "DIAGNOSTIC RUN, NOT A CONFORMANCE RESULT: the setup did not wait for $SKIPREADY"
if [ $rc != 0 ]; then
  echo "suite log: $REPORT/gateway-conformance.log (last lines below)"
  tail -30 "$REPORT/gateway-conformance.log"
fi
exit $rc
