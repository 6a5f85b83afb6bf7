#!/usr/bin/env bash
# bench-podnet.sh: what the pod network costs. Pod-to-pod TCP throughput (iperf3, the Debian
# package) and round-trip latency (ping) between a pod on node1 and a pod on node2 of a two-node
# `minikit lab`, with --pod-network host-gw and with --pod-network vxlan, next to the underlay
# itself (node1's namespace to node2's, the same veths and bridge, no pod hop), one run each, and
# the ratios: vxlan against host-gw (the encapsulation's cost) and both against the underlay.
#
#   sudo ./scripts/bench-podnet.sh
#   sudo ./scripts/bench-podnet.sh --families
#
# --families measures IPv6 against IPv4 instead, in one dual-stack lab (`lab up --ip-family
# dual`, host-gw): from a pod on node1 to a pod on node2 by its IPv4 and its IPv6 address, and to
# the same pod behind a RequireDualStack ClusterIP Service by its IPv4 and IPv6 ClusterIPs
# (through the service proxy's DNAT): TCP throughput (iperf3), the round trip by ping (pod
# addresses only: a ClusterIP answers no ICMP) and the mean TCP connect time of CONNECTS (200)
# curl connections to agnhost netexec in the same pod (one round trip, through the DNAT on the
# ClusterIP path). The families alternate, every path measured ROUNDS (3) times; it prints each
# path's median and all values, and the ratios IPv6/IPv4.
#
# Environment (defaults): WORK=/tmp/minikit-bench-podnet DURATION=5 (seconds of iperf3)
#   PINGS=200 (ping -i 0.01). Prints one line per path and the ratios:
#   path=underlay gbps=N rtt_ms=N
#   path=host-gw  gbps=N rtt_ms=N
#   path=vxlan    gbps=N rtt_ms=N
#   ratio vxlan/host-gw throughput=R rtt=R ...
# Everything runs in the labs' network namespaces (labs named bpn-hg and bpn-vx, removed at the
# end, also on failure); nothing in the root namespace but the labs' loopback forwarders.
set -euo pipefail
FAMILIES=''
[ "${1:-}" != --families ] || FAMILIES=1
ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${WORK:-/tmp/minikit-bench-podnet}
DURATION=${DURATION:-5}
PINGS=${PINGS:-200}
GO=${GO:-go}
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin
[ "$(id -u)" = 0 ] || { echo "run as root: sudo $0" >&2; exit 1; }
case $WORK in /tmp/*) ;; *) echo "WORK must be under /tmp" >&2; exit 2 ;; esac
command -v iperf3 >/dev/null || {
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq iperf3 >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq iperf3 >/dev/null; }
}

rm -rf "$WORK"
mkdir -p "$WORK"
MINIKIT=$WORK/minikit
LABS=()
cleanup() {
  local l
  for l in ${LABS[@]+"${LABS[@]}"}; do "$MINIKIT" lab down --name "$l" --dir "$WORK/$l" >/dev/null || echo "lab down $l failed" >&2; done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "# building minikit" >&2
(cd "$ROOT" && "$GO" build -o "$MINIKIT" ./cmd/minikit)

# gbps reads iperf3's JSON: the receiver's throughput, in Gbit/s.
gbps() { python3 -c 'import json,sys; print("%.2f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e9))'; }
# rtt reads ping's summary: the average round trip, in ms.
rtt() { sed -n 's|.* = [0-9.]*/\([0-9.]*\)/.*|\1|p'; }
# retry CMD...: until it succeeds (the iperf3 server may not listen yet), 10 s at most.
retry() {
  local i
  for i in $(seq 50); do "$@" 2>/dev/null && return 0; sleep 0.2; done
  "$@"
}

declare -A GBPS RTT
lab_up() {
  local name=$1 mode=$2
  LABS+=("$name")
  echo "# lab up $name --pod-network $mode" >&2
  "$MINIKIT" lab up --name "$name" --dir "$WORK/$name" --nodes 2 --pod-network "$mode" --kubeconfig-merge=false >/dev/null
}
on() { local l=$1 h=$2; shift 2; "$MINIKIT" lab exec --name "$l" --dir "$WORK/$l" "$h" -- "$@"; }

# measure_pods LAB PATH: iperf3 and ping from a pod on node1 to a pod on node2.
measure_pods() {
  local l=$1 path=$2 kc=$WORK/$1/kubeconfig ip
  kubectl --kubeconfig "$kc" apply -f - >/dev/null <<'EOF'
apiVersion: v1
kind: Pod
metadata: {name: server}
spec: {nodeName: node2, containers: [{name: iperf3, image: busybox, command: [iperf3, -s]}]}
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec: {nodeName: node1, containers: [{name: client, image: busybox, command: [sleep, infinity]}]}
EOF
  kubectl --kubeconfig "$kc" wait --for=condition=Ready pod/server pod/client --timeout=60s >/dev/null
  ip=$(kubectl --kubeconfig "$kc" get pod server -o jsonpath='{.status.podIP}')
  echo "# $path: pod on node1 -> pod $ip on node2" >&2
  RTT[$path]=$(kubectl --kubeconfig "$kc" exec client -- ping -q -c "$PINGS" -i 0.01 "$ip" | rtt)
  GBPS[$path]=$(retry kubectl --kubeconfig "$kc" exec client -- iperf3 -c "$ip" -t "$DURATION" -J | gbps)
}

# measure_underlay LAB: the same from node1's namespace to node2's address.
measure_underlay() {
  local l=$1 ip=192.168.56.11 pid
  echo "# underlay: node1 -> node2 ($ip)" >&2
  on "$l" node2 iperf3 -s -1 >/dev/null 2>&1 &
  pid=$!
  RTT[underlay]=$(on "$l" node1 ping -q -c "$PINGS" -i 0.01 "$ip" | rtt)
  GBPS[underlay]=$(retry on "$l" node1 iperf3 -c "$ip" -t "$DURATION" -J | gbps)
  wait "$pid" || true
}

ratio() { python3 -c "import sys; a,b=map(float,sys.argv[1:]); print('%.2f' % (a/b) if b else 'n/a')" "$1" "$2"; }

if [ -n "$FAMILIES" ]; then
  CONNECTS=${CONNECTS:-200} ROUNDS=${ROUNDS:-3}
  LABS+=(bpn-ds)
  echo "# lab up bpn-ds --ip-family dual --pod-network host-gw" >&2
  "$MINIKIT" lab up --name bpn-ds --dir "$WORK/bpn-ds" --nodes 2 --pod-network host-gw --ip-family dual --kubeconfig-merge=false >/dev/null
  kc=$WORK/bpn-ds/kubeconfig
  kubectl --kubeconfig "$kc" apply -f - >/dev/null <<'YAML'
apiVersion: v1
kind: Pod
metadata: {name: server, labels: {app: server}}
spec:
  nodeName: node2
  containers:
  - {name: iperf3, image: busybox, command: [iperf3, -s]}
  - {name: netexec, image: registry.k8s.io/e2e-test-images/agnhost:2.66.1, args: [netexec, --http-port=8080]}
---
apiVersion: v1
kind: Service
metadata: {name: server}
spec:
  ipFamilyPolicy: RequireDualStack
  selector: {app: server}
  ports: [{name: iperf3, port: 5201}, {name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: client}
spec: {nodeName: node1, containers: [{name: client, image: busybox, command: [sleep, infinity]}]}
YAML
  kubectl --kubeconfig "$kc" wait --for=condition=Ready pod/server pod/client --timeout=60s >/dev/null
  read -r pod4 pod6 < <(kubectl --kubeconfig "$kc" get pod server -o jsonpath='{.status.podIPs[0].ip} {.status.podIPs[1].ip}{"\n"}')
  read -r svc4 svc6 < <(kubectl --kubeconfig "$kc" get svc server -o jsonpath='{.spec.clusterIPs[0]} {.spec.clusterIPs[1]}{"\n"}')
  [ -n "$pod6" ] && [ -n "$svc6" ] || { echo "no IPv6 address: pod $pod4 $pod6, Service $svc4 $svc6" >&2; exit 1; }
  echo "# server pod $pod4 $pod6, Service $svc4 $svc6" >&2
  x() { kubectl --kubeconfig "$kc" exec client -- "$@"; }
  # connect_ms HOST PORT: the mean TCP connect time of CONNECTS connections, in ms.
  connect_ms() {
    local url="http://$1:$2/hostname"
    case $1 in *:*) url="http://[$1]:$2/hostname" ;; esac
    x sh -c "for i in \$(seq $CONNECTS); do curl -s -o /dev/null -w '%{time_connect}\n' '$url'; done" |
      python3 -c 'import sys; v=[float(l) for l in sys.stdin if l.strip()]; print("%.3f" % (1000*sum(v)/len(v)))'
  }
  declare -A S
  add() { S[$1]="${S[$1]:-} $2"; }
  for r in $(seq "$ROUNDS"); do
    for fam in 4 6; do
      pod=pod$fam svc=svc$fam
      echo "# round $r, IPv$fam" >&2
      add "pod$fam.gbps" "$(retry x iperf3 -c "${!pod}" -t "$DURATION" -J | gbps)"
      add "svc$fam.gbps" "$(retry x iperf3 -c "${!svc}" -t "$DURATION" -J | gbps)"
      add "pod$fam.rtt_ms" "$(x ping -q -c "$PINGS" -i 0.01 "${!pod}" | rtt)"
      add "pod$fam.connect_ms" "$(connect_ms "${!pod}" 8080)"
      add "svc$fam.connect_ms" "$(connect_ms "${!svc}" 80)"
    done
  done
  # shellcheck disable=SC2086 # the values are a word list
  median() { python3 -c 'import statistics,sys; print("%.3f" % statistics.median(map(float,sys.argv[1:])))' $1; }
  for m in gbps connect_ms; do
    for p in pod svc; do
      for fam in 4 6; do k=$p$fam.$m; printf '%-18s median=%-8s all=%s\n' "$k" "$(median "${S[$k]}")" "${S[$k]}"; done
    done
  done
  for fam in 4 6; do k=pod$fam.rtt_ms; printf '%-18s median=%-8s all=%s\n' "$k" "$(median "${S[$k]}")" "${S[$k]}"; done
  for m in pod.gbps svc.gbps pod.rtt_ms pod.connect_ms svc.connect_ms; do
    printf 'ratio IPv6/IPv4 %-16s %s\n' "$m" "$(ratio "$(median "${S[${m/./6.}]}")" "$(median "${S[${m/./4.}]}")")"
  done
  exit 0
fi

lab_up bpn-hg host-gw
measure_underlay bpn-hg
measure_pods bpn-hg host-gw
"$MINIKIT" lab down --name bpn-hg --dir "$WORK/bpn-hg" >/dev/null
LABS=()
lab_up bpn-vx vxlan
measure_pods bpn-vx vxlan

for p in underlay host-gw vxlan; do
  printf 'path=%-8s gbps=%s rtt_ms=%s\n' "$p" "${GBPS[$p]}" "${RTT[$p]}"
done
for pair in vxlan/host-gw vxlan/underlay host-gw/underlay; do
  a=${pair%/*} b=${pair#*/}
  printf 'ratio %-16s throughput=%s rtt=%s\n' "$pair" "$(ratio "${GBPS[$a]}" "${GBPS[$b]}")" "$(ratio "${RTT[$a]}" "${RTT[$b]}")"
done
