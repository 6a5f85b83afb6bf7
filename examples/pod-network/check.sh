#!/usr/bin/env bash
# The pod network: the same cross-node ping in host-gw and in vxlan mode. See README.md.
source "$(dirname "$0")/../lib.sh"
use_namespace pod-network
DIR=$(dirname "$0")
UNDERLAY=$LAB-net   # the lab's underlay bridge br0 lives in this namespace

# mode_of NODE: the pod network a node publishes (flannel's backend-type annotation).
mode_of() { kubectl get node "$1" -o jsonpath='{.metadata.annotations.flannel\.alpha\.coreos\.com/backend-type}' 2>/dev/null; }
mode_is() { [ "$(mode_of "$1")" = "$2" ]; }
NODES=$(kubectl get nodes -o jsonpath='{.items[*].metadata.name}')
ORIG=$(mode_of node1)
[ -n "$ORIG" ] || fail "node1 publishes no pod network (annotation flannel.alpha.coreos.com/backend-type)"

# switch_to MODE: restart every node whose pod network differs with --pod-network MODE
# (node1 runs the API server: kubectl waits for it to come back).
switch_to() {
  local m=$1 n
  for n in $NODES; do
    mode_is "$n" "$m" && continue
    printf '$ minikit lab stop %s && minikit lab start %s --pod-network %s\n' "$n" "$n" "$m"
    "$MINIKIT" lab stop --name "$LAB" --dir "$LAB_DIR" "$n" || fail "minikit lab stop $n"
    "$MINIKIT" lab start --name "$LAB" --dir "$LAB_DIR" "$n" --pod-network "$m" || fail "minikit lab start $n --pod-network $m"
    eventually 60 mode_is "$n" "$m" || fail "$n does not publish pod network $m after its restart"
  done
}
# The lab goes back to the pod network it had when the check ends.
on_exit "switch_to $ORIG"

say "two pods: client on node1, echo on node2"
show kubectl apply -n "$NS" -f "$DIR/pods.yaml"
k wait --for=condition=Ready pod/client pod/echo --timeout=60s >/dev/null || fail "pods not Ready: $(k get pods -o wide 2>&1)"
show k get pods -o wide
ECHO=$(k get pod echo -o jsonpath='{.status.podIP}')
ECHO_SUBNET=$(kubectl get node node2 -o jsonpath='{.spec.podCIDR}')
SUBNET0=${ECHO_SUBNET%/*}   # node2's pod subnet's .0: its VXLAN endpoint in vxlan mode

# capture FILTER -T-ARGS...: start tcpdump on the underlay bridge (2 packets), ping
# the echo pod from the client pod, print what tcpdump saw.
capture() {
  local filter=$1; shift
  local out
  out=$(mktemp)
  printf '$ sudo ip netns exec %s tcpdump -ni br0 -e -v %s%s -c 2 &\n' "$UNDERLAY" "${*:+$* }" "$filter"
  timeout 15 ip netns exec "$UNDERLAY" tcpdump -l -ni br0 -e -v "$@" -c 2 "$filter" >"$out" 2>&1 &
  local pid=$!
  eventually 5 grep -q "listening on" "$out" || { kill $pid; fail "tcpdump did not start: $(cat "$out")"; }
  inpod client ping -c 1 -W 2 "$ECHO" >/dev/null || true
  wait $pid || true
  printf '$ kubectl exec -n %s client -- ping -c 1 %s\n' "$NS" "$ECHO"
  cat "$out"
  CAPTURE=$(cat "$out")
  rm -f "$out"
}

###### host-gw
say "host-gw: node1 routes node2's pod subnet via node2's address"
switch_to host-gw
printf '$ kubectl exec -n %s client -- ping -c 2 %s\n' "$NS" "$ECHO"
eventually 30 inpod client ping -c 2 -W 2 "$ECHO" || fail "host-gw: the client pod cannot ping the echo pod on node2: $OUT"
echo "$OUT"
ROUTES=$(show on node1 ip route) && echo "$ROUTES"
grep -qE "^$ECHO_SUBNET via $NODE2 dev eth1 proto 77" <<<"$ROUTES" || fail "host-gw: node1 has no route $ECHO_SUBNET via $NODE2"
on node1 ip link show flannel.1 >/dev/null 2>&1 && fail "host-gw: node1 still has flannel.1"
say "host-gw on the wire: the pod-to-pod packet itself, between the nodes' MACs"
capture icmp
grep -q "> $ECHO: ICMP echo request" <<<"$CAPTURE" || fail "host-gw: no ICMP echo request to $ECHO on br0"
grep -q "8472" <<<"$CAPTURE" && fail "host-gw: a VXLAN packet on br0"

###### vxlan
say "vxlan: node1 sends node2's pod subnet to flannel.1, which wraps it in UDP 8472 to node2"
switch_to vxlan
printf '$ kubectl exec -n %s client -- ping -c 2 %s\n' "$NS" "$ECHO"
eventually 30 inpod client ping -c 2 -W 2 "$ECHO" || fail "vxlan: the client pod cannot ping the echo pod on node2: $OUT"
echo "$OUT"
LINK=$(show on node1 ip -d link show flannel.1) && echo "$LINK"
for want in "mtu 1450" "vxlan id 1 local $NODE1 dev eth1" "dstport 8472" "nolearning"; do
  has "$LINK" "$want" || fail "vxlan: node1's flannel.1 lacks '$want'"
done
ROUTES=$(show on node1 ip route) && echo "$ROUTES"
grep -qE "^$ECHO_SUBNET via $SUBNET0 dev flannel.1 proto 77 onlink" <<<"$ROUTES" || fail "vxlan: node1 has no route $ECHO_SUBNET via $SUBNET0 dev flannel.1 onlink"
MAC=$(kubectl get node node2 -o jsonpath='{.metadata.annotations.flannel\.alpha\.coreos\.com/backend-data}' | sed -n 's/.*"VtepMAC":"\([^"]*\)".*/\1/p')
show kubectl get node node2 -o jsonpath='{.metadata.annotations}'; echo
NEIGH=$(show on node1 ip neigh show dev flannel.1) && echo "$NEIGH"
grep -q "^$SUBNET0 lladdr $MAC PERMANENT" <<<"$NEIGH" || fail "vxlan: node1 has no permanent neighbour $SUBNET0 -> $MAC"
FDB=$(show on node1 bridge fdb show dev flannel.1) && echo "$FDB"
grep -q "^$MAC dst $NODE2 self permanent" <<<"$FDB" || fail "vxlan: node1 has no FDB entry $MAC dst $NODE2"
MTU=$(inpod client ip -o link show eth0)
printf '$ kubectl exec -n %s client -- ip link show eth0\n%s\n' "$NS" "$MTU"
has "$MTU" " mtu 1450 " || fail "vxlan: the client pod's eth0 MTU is not 1450"
say "vxlan on the wire: an outer IP/UDP header (node1 -> node2:8472, VNI 1) around the pod-to-pod packet"
capture "udp port 8472" -T vxlan
grep -qE "$NODE1\.[0-9]+ > $NODE2\.8472: VXLAN, flags \[I\] \(0x08\), vni 1" <<<"$CAPTURE" || fail "vxlan: no VXLAN packet $NODE1 -> $NODE2:8472 with VNI 1 on br0"
grep -q "> $ECHO: ICMP echo request" <<<"$CAPTURE" || fail "vxlan: the VXLAN packet does not carry the ICMP echo request to $ECHO"
say "minikit trace: the route out is flannel.1, the encapsulation hop"
printf '$ minikit trace -n %s pod/client %s:8080\n' "$NS" "$ECHO"
TRACE=$("$MINIKIT" trace --kubeconfig "$KUBECONFIG" --lab "$LAB" -n "$NS" pod/client "$ECHO:8080" 2>&1) || fail "minikit trace: $TRACE"
echo "$TRACE" | tail -1
has "$TRACE" "out flannel.1 via $SUBNET0, VXLAN encapsulated to node2's $NODE2:8472 (VNI 1)" || fail "minikit trace does not show the VXLAN hop"

shown "the same cross-node ping in host-gw (route via $NODE2) and vxlan (flannel.1: neigh, fdb, UDP 8472 around the pod packet on br0)"
