#!/usr/bin/env bash
# externalIPs: the chapter's 80.11.12.10 reached from the client. See README.md.
source "$(dirname "$0")/../lib.sh"
use_namespace externalips
DIR=$(dirname "$0")
EIP=80.11.12.10

say "apply the chapter's my-service (externalIPs: [$EIP]) and the app: MyApp pods behind it"
show kubectl apply -n "$NS" -f "$DIR/my-service.yaml"
wait_deploy myapp
show k get svc my-service
k get svc my-service | grep -q "$EIP" || fail "kubectl get svc does not show $EIP as an EXTERNAL-IP"

say "the rule on every node: KUBE-SERVICES matches $EIP:80 and jumps to the Service (KUBE-EXT-...)"
for node in node1 node2; do
  if [ "$(proxy_mode)" = nftables ]; then
    rule() { nft_elem "$node" service-ips "$EIP \. tcp \. 80 : goto external-[^ ,}]+"; }
    eventually 15 rule || fail "$node's service-ips map has no element for $EIP . tcp . 80"
    echo "$node: service-ips: $OUT"
    continue
  fi
  rule() { on "$node" iptables-save -t nat | grep -E -- "^-A KUBE-SERVICES -d $EIP/32 .*\"$NS/my-service:http external IP\" .*--dport 80 -j KUBE-EXT-"; }
  eventually 15 rule || fail "$node has no KUBE-SERVICES rule for $EIP:80"
  echo "$node: $OUT"
done

say "the network must bring $EIP to a node: on the client host, route it via node1 (the lab's stand-in for a router)"
on_exit "on client ip route del $EIP/32 via $NODE1"
show on client ip route replace "$EIP/32" via "$NODE1"

say "the client reaches my-service at $EIP:80"
printf '$ minikit lab exec client -- curl http://%s/\n' "$EIP"
eventually 15 curl_has client "http://$EIP/" myapp- || fail "curl http://$EIP/ from the client: $OUT"
echo "$OUT"
ROUTE=$(on node1 ip -o addr show | grep -F "$EIP" || true)
[ -z "$ROUTE" ] || fail "node1 has $EIP on an interface: $ROUTE (the proxy should only DNAT it)"
echo "-> node1 does not own $EIP: the packet was DNATed in PREROUTING before routing"

shown "with a route to node1, the client reached pod $OUT at $EIP:80 through the proxy's rule for the external IP"
