#!/usr/bin/env bash
# Kubernetes' own conformance tests, unmodified, against a minikit lab.
#
#   sudo ./scripts/conformance.sh                       # the 47 [sig-network] [Conformance] specs
#   sudo ./scripts/conformance.sh --focus 'DNS.*Conformance'
#   sudo ./scripts/conformance.sh --focus 'Netpol'      # the upstream NetworkPolicy specs
#   sudo ./scripts/conformance.sh --lab NAME            # use a running lab instead of making one
#   sudo ./scripts/conformance.sh --proxy-mode nftables # the lab's kube-proxy in nftables mode
#   sudo ./scripts/conformance.sh --procs 1             # one Ginkgo process (default 4, as upstream's jobs run in parallel)
#   sudo ./scripts/conformance.sh --control-plane-taint # node1 tainted as kubeadm's control plane (lab up --control-plane-taint)
#   sudo ./scripts/conformance.sh --nodes 7 --control-plane-taint --focus 'Traffic Distribution|Topology Hints' # kubeadm-shaped: 6 workers, 2 in each of 3 zones
#   sudo ./scripts/conformance.sh --ip-family dual --focus 'IPv6DualStack' # a dual-stack lab (lab up --ip-family dual)
#   sudo ./scripts/conformance.sh --ip-family ipv6      # an IPv6 single-stack lab (lab up --ip-family ipv6)
#
# It builds upstream e2e.test v1.37.2 once (scripts/build-e2e.sh, cached under
# /var/cache/minikit/e2e; about 30 minutes cold on 2 cores), builds minikit, brings
# up a two-node lab, and runs e2e.test --provider=local INSIDE node1's network
# namespace with a kubeconfig for the API's lab address, in parallel Ginkgo
# processes (the ginkgo CLI build-e2e.sh builds beside it; specs marked
# [Serial] run alone at the end, as Ginkgo does for upstream): every packet the suite
# sends (to pods, Services, node ports) stays in the lab. It writes the JUnit
# report (--report-dir, default /tmp/minikit-conformance), prints one line per
# spec (PASS/FAIL/SKIP, seconds, the failure's first line) and the totals, and
# removes the lab it made, also on failure or Ctrl-C. Exit status 0 only when no
# spec failed and none was skipped. The suite needs no IP family flag: it reads the
# cluster's primary family from the kubernetes Service's ClusterIP, and its
# [Feature:IPv6DualStack] specs assume a dual-stack cluster. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root: sudo $0" >&2; exit 1; }
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

FOCUS='\[sig-network\].*\[Conformance\]'
SKIP=''
TAINT='' LAB='' NODES=2 REPORT=/tmp/minikit-conformance TIMEOUT=60m PROXY_MODE=iptables IP_FAMILY=ipv4 PROCS=${CONFORMANCE_PROCS:-4}
while [ $# -gt 0 ]; do
  case $1 in
    --focus) FOCUS=$2; shift 2 ;;
    --skip) SKIP=$2; shift 2 ;;
    --lab) LAB=$2; shift 2 ;;
    --nodes) NODES=$2; shift 2 ;;
    --proxy-mode) PROXY_MODE=$2; shift 2 ;;
    --ip-family) IP_FAMILY=$2; shift 2 ;;
    --report-dir) REPORT=$2; shift 2 ;;
    --timeout) TIMEOUT=$2; shift 2 ;;
    --procs) PROCS=$2; shift 2 ;;
    --control-plane-taint) TAINT=--control-plane-taint; shift ;;
    -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[ "${MINIKIT_SKIP_DEPS:-}" = 1 ] || ./scripts/deps.sh conformance

START=$SECONDS
E2E=$(./scripts/build-e2e.sh)
TMP=$(mktemp -d /tmp/minikit-conformance.XXXXXX)
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
  echo "conformance run took $((SECONDS - START))s"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[ -x "$MINIKIT" ] || go build -o "$MINIKIT" ./cmd/minikit
if [ -z "$LAB" ]; then
  LAB=conf$$
  made=1
  "$MINIKIT" lab up --name "$LAB" --nodes "$NODES" --proxy-mode "$PROXY_MODE" --ip-family "$IP_FAMILY" --dir "$TMP/lab" --kubeconfig-merge=false $TAINT >"$TMP/lab-up.log" 2>&1 ||
    { cat "$TMP/lab-up.log"; exit 1; }
fi
status=$("$MINIKIT" lab status --name "$LAB" -o json)
field() { python3 -c 'import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1]))' "$1" <<<"$status"; }
internal=$(field 'd["internalAPIServer"]')
kubeconfig=$(field 'd["kubeconfig"]')
netns=$(field '[h["netns"] for h in d["hosts"] if h["name"]=="node1"][0]')
# The suite reads the cluster's size from --num-nodes (upstream's
# hack/ginkgo-e2e.sh passes it); left at -1, every spec that needs two nodes
# skips itself. Counted from the lab, so --lab NAME gets its own size.
numnodes=$(field 'sum(1 for h in d["hosts"] if h["role"]=="node")')
# The same credentials, addressed to the API where it listens inside the lab.
sed -E "s#^(\s*server:).*#\1 $internal#" "$kubeconfig" >"$TMP/kubeconfig"

mkdir -p "$REPORT"
rm -f "$REPORT"/junit_*.xml
echo "== e2e.test in netns $netns against $internal ($numnodes nodes), $PROCS Ginkgo processes, focus: $FOCUS"
GINKGO=$(dirname "$E2E")/ginkgo
gargs=(--procs="$PROCS" --focus="$FOCUS" --timeout="$TIMEOUT" --no-color --poll-progress-after=5m)
[ -z "$SKIP" ] || gargs+=(--skip="$SKIP")
rc=0
t0=$SECONDS
# The suite's kubectl keeps no discovery cache. Every lab's API has the same
# address (192.168.56.10:6443), so root's ~/.kube/cache would hand one lab's
# resources to the next for 6 hours; and within a run, a cache written before
# a spec made its CRD hides the CRD's short name from `kubectl explain` (whose
# RESTMapper lookup, unlike `kubectl get`'s, does not expand a short name again
# after refreshing discovery). Nothing can be created under /dev/null, so
# every kubectl the suite runs reads the server's discovery afresh, as a client
# without a cache does.
# The suite's own temporary files (kubectl's kuberc specs make a directory per
# spec and leave it) go to a directory of this run, removed with it.
mkdir -p "$TMP/tmp"
TMPDIR=$TMP/tmp KUBECACHEDIR=/dev/null ip netns exec "$netns" "$GINKGO" "${gargs[@]}" "$E2E" -- --provider=local --kubeconfig="$TMP/kubeconfig" \
  --num-nodes="$numnodes" --report-dir="$REPORT" >"$REPORT/e2e.log" 2>&1 || rc=$?
echo "e2e.test ran ${PROCS} processes for $((SECONDS - t0))s"
[ "${VERBOSE:-}" != 1 ] || cat "$REPORT/e2e.log"

# One line per spec that ran (or was skipped), from the JUnit report.
python3 - "$REPORT" <<'EOF' || rc=1
import glob, sys, xml.etree.ElementTree as ET
files = glob.glob(sys.argv[1] + "/junit_*.xml")
if not files:
    print("no JUnit report: see " + sys.argv[1] + "/e2e.log"); sys.exit(1)
counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
for f in files:
    for tc in ET.parse(f).getroot().iter("testcase"):
        name = tc.get("name", "")
        if name.startswith("[SynchronizedBeforeSuite]") or name.startswith("[SynchronizedAfterSuite]") \
                or name.startswith("[ReportAfterSuite]") or name.startswith("[ReportBeforeSuite]"):
            if tc.find("failure") is None and tc.find("error") is None:
                continue
        sk = tc.find("skipped")
        if sk is not None:
            # Ginkgo reports specs outside the focus as skipped with the bare
            # message "skipped"; a spec that skipped itself says why ("skipped - ...").
            if (sk.get("message") or "").strip() == "skipped":
                continue
            verdict = "SKIP"
        elif tc.find("failure") is not None or tc.find("error") is not None:
            verdict = "FAIL"
        else:
            verdict = "PASS"
        counts[verdict] += 1
        why = ""
        el = tc.find("failure") if tc.find("failure") is not None else tc.find("error")
        if verdict == "SKIP":
            el = tc.find("skipped")
        if el is not None:
            why = (el.get("message") or el.text or "").strip().splitlines()
            why = " — " + why[0][:200] if why else ""
        print(f'{verdict}  {float(tc.get("time", 0)):7.1f}s  {name}{why}')
print(f'{counts["PASS"]} passed, {counts["FAIL"]} failed, {counts["SKIP"]} skipped')
sys.exit(1 if counts["FAIL"] or counts["SKIP"] or counts["PASS"] == 0 else 0)
EOF
if [ $rc != 0 ]; then
  echo "e2e log: $REPORT/e2e.log (last lines below)"
  tail -40 "$REPORT/e2e.log"
  # The lab's own warnings (failed or slow controller syncs, proxy and agent
  # errors), the last of each host's, before the lab and its logs go.
  for f in "$TMP"/lab/*.log; do
    [ -f "$f" ] || continue
    n=$(grep -cE 'level=(WARN|ERROR)' "$f" || true)
    [ "$n" != 0 ] || continue
    echo "== $(basename "$f"): $n warnings and errors, the last 30:"
    grep -E 'level=(WARN|ERROR)' "$f" | tail -30 | cut -c1-400
  done
fi
exit $rc
