#!/usr/bin/env bash
# externalTrafficPolicy Cluster (SNAT) and Local (source kept, no hop). See README.md.
source "$(dirname "$0")/../lib.sh"
use_namespace snat-and-local
DIR=$(dirname "$0")

say "apply the echo server (pinned to node1) behind a NodePort Service, externalTrafficPolicy: Cluster"
show kubectl apply -n "$NS" -f "$DIR/echo.yaml"
wait_deploy echo
show k get pods -o wide
NP=$(k get svc echo -o jsonpath='{.spec.ports[0].nodePort}')
POD_NODE=$(k get pods -l app=echo -o jsonpath='{.items[0].spec.nodeName}')
[ "$POD_NODE" = node1 ] || fail "the echo pod runs on $POD_NODE, want node1"

say "Cluster: client -> node2:$NP -> the pod on node1. The echo server sees node2's address, not the client's"
# node2's address toward the pod: 192.168.56.11 (host-gw), 10.244.1.0 (flannel.1, vxlan).
SNAT=$(node_src node2 "$(k get pods -l app=echo -o jsonpath='{.items[0].status.podIP}')")
printf '$ minikit lab exec client -- curl http://%s:%s/\n' "$NODE2" "$NP"
eventually 15 curl_has client "http://$NODE2:$NP/" "client_address=$SNAT:" || fail "via node2 (Cluster) the echo server did not see node2 ($SNAT): $OUT"
echo "$OUT" | head -3

if [ "$(proxy_mode)" = nftables ]; then
say "why (nftables mode): on node2, the service's external- chain marks the packet 0x4000; the masquerading chain masquerades marked packets"
ELEM=$(nft_elem node2 service-nodeports "tcp \. $NP : goto external-[^ ,}]+") || fail "node2's service-nodeports map has no element for tcp . $NP"
ext=${ELEM##*goto }
CHAIN=$(nft_chain node2 "$ext"); echo "$CHAIN"
grep -qE -- "mark set mark or 0x0*4000|meta mark set meta mark \| 0x0*4000" <<<"$CHAIN" || fail "$ext does not mark the packet 0x4000"
MASQ=$(nft_chain node2 masquerading); echo "$MASQ"
grep -qE -- "masquerade fully-random" <<<"$MASQ" || fail "node2's masquerading chain does not masquerade"
grep -qE -- "0x0*4000" <<<"$MASQ" || fail "node2's masquerading chain does not test the 0x4000 mark"
else
say "why: on node2, KUBE-EXT marks the packet 0x4000 (KUBE-MARK-MASQ); KUBE-POSTROUTING masquerades marked packets"
RULES=$(on node2 iptables-save -t nat)
for want in "^-A KUBE-EXT-[A-Z0-9]+ .*\"masquerade traffic for $NS/echo:http external destinations\" -j KUBE-MARK-MASQ" \
  '^-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000' \
  '^-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN' \
  '^-A KUBE-POSTROUTING .*-j MASQUERADE'; do
  grep -E -- "$want" <<<"$RULES" || fail "node2's nat table has no rule matching: $want"
done
fi
echo "-> the reply must come back through node2 to be un-NATed: the pod answers node2, node2 answers the client"

say "switch to externalTrafficPolicy: Local"
show k patch svc echo -p '{"spec":{"externalTrafficPolicy":"Local"}}'

say "Local: client -> node1:$NP, the node with the endpoint. The echo server sees the client itself ($CLIENT)"
printf '$ minikit lab exec client -- curl http://%s:%s/\n' "$NODE1" "$NP"
eventually 15 curl_has client "http://$NODE1:$NP/" "client_address=$CLIENT:" || fail "via node1 (Local) the echo server did not see the client ($CLIENT): $OUT"
echo "$OUT" | head -3

say "Local: client -> node2:$NP. node2 has no endpoint of echo: it drops the connection (no SNAT hop to node1)"
# drops: the connection times out (DROP), rather than being answered or refused.
drops() {
  local out
  out=$(on client curl -sS --max-time 1 "http://$NODE2:$NP/" 2>&1) && { echo "$out"; return 1; }
  echo "$out"
  has "$out" "timed out"
}
printf '$ minikit lab exec client -- curl --max-time 1 http://%s:%s/\n' "$NODE2" "$NP"
eventually 15 drops || fail "node2 still answers NodePort $NP with externalTrafficPolicy Local: $OUT"
echo "$OUT"
if [ "$(proxy_mode)" = nftables ]; then
  nft_elem node2 no-endpoint-nodeports "tcp \. $NP [^,}]*: drop" ||
    fail "node2's no-endpoint-nodeports map has no drop element for tcp . $NP"
else
  FILTER=$(on node2 iptables-save -t filter)
  grep -E -- "^-A KUBE-EXTERNAL-SERVICES .*\"$NS/echo:http has no local endpoints\" .*--dport $NP -j DROP" <<<"$FILTER" ||
    fail "node2's filter table has no 'has no local endpoints' DROP for port $NP"
fi

shown "Cluster: via node2 the echo pod saw $SNAT (mark 0x4000, MASQUERADE); Local: via node1 it saw the client $CLIENT, and node2 (no endpoint) dropped"
