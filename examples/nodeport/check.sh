#!/usr/bin/env bash
# NodePort: explicit and allocated ports, the range, every node, KUBE-NODEPORTS. See README.md.
source "$(dirname "$0")/../lib.sh"
use_namespace nodeport
DIR=$(dirname "$0")

say "the chapter's nodePort: 8080 is rejected: it is outside the NodePort range"
if REJECT=$(show kubectl apply -n "$NS" -f "$DIR/nodeport-8080.yaml" 2>&1); then fail "nodePort 8080 was accepted: $REJECT"; fi
echo "$REJECT"
has "$REJECT" 'spec.ports[0].nodePort: Invalid value: 8080: provided port is not in the valid range. The range of valid ports is 30000-32767' ||
  fail "the rejection does not name the field and the valid range"
k get svc my-service >/dev/null 2>&1 && fail "my-service exists after a rejected create"

say "apply hostnames behind two NodePort Services: nodePort 30007 asked for, and one allocated"
show kubectl apply -n "$NS" -f "$DIR/hostnames-nodeport.yaml"
wait_deploy hostnames
show k get svc -o wide
EXPLICIT=$(k get svc hostnames-explicit -o jsonpath='{.spec.ports[0].nodePort}')
ALLOCATED=$(k get svc hostnames-allocated -o jsonpath='{.spec.ports[0].nodePort}')
[ "$EXPLICIT" = 30007 ] || fail "hostnames-explicit has nodePort $EXPLICIT, want 30007"
[ "$ALLOCATED" -ge 30000 ] && [ "$ALLOCATED" -le 32767 ] || fail "hostnames-allocated got nodePort $ALLOCATED, outside 30000-32767"
echo "-> 30007 as asked; $ALLOCATED allocated from 30000-32767"

say "from the lab's client host (a laptop next to the cluster), every node answers on both ports"
for node in $NODE1 $NODE2; do
  for port in $EXPLICIT $ALLOCATED; do
    printf '$ curl http://%s:%s/  -> ' "$node" "$port"
    eventually 15 curl_has client "http://$node:$port/" hostnames- || fail "curl http://$node:$port/ from the client: $OUT"
    echo "$OUT"
  done
done

if [ "$(proxy_mode)" = nftables ]; then
say "the rules on node2 (nftables mode): services looks the port up in the service-nodeports map; each port goes to external-..."
show on node2 nft list chain ip kube-proxy services
grep -q -- "vmap @service-nodeports" <<<"$(nft_chain node2 services)" || fail "node2's services chain does not look up @service-nodeports"
for port in $EXPLICIT $ALLOCATED; do
  ELEM=$(nft_elem node2 service-nodeports "tcp \. $port : goto external-[^ ,}]+") || fail "node2's service-nodeports map has no element for tcp . $port"
  echo "service-nodeports: $ELEM"
  ext=${ELEM##*goto }
  CHAIN=$(nft_chain node2 "$ext") || fail "node2 has no chain $ext"
  echo "$CHAIN"
  grep -qE -- "mark set mark or 0x0*4000|meta mark set meta mark \| 0x0*4000" <<<"$CHAIN" || fail "$ext does not mark for masquerade"
  grep -q -- "goto service-" <<<"$CHAIN" || fail "$ext does not go to the service chain"
done
VIA="service-nodeports -> external- -> service-"
else
VIA="KUBE-NODEPORTS -> KUBE-EXT -> KUBE-SVC"
say "the rules on node2: KUBE-SERVICES ends in KUBE-NODEPORTS for local addresses; each port jumps to KUBE-EXT-..."
RULES=$(on node2 iptables-save -t nat)
grep -E -- '^-A KUBE-SERVICES .*-m addrtype --dst-type LOCAL -j KUBE-NODEPORTS' <<<"$RULES" || fail "KUBE-SERVICES does not jump to KUBE-NODEPORTS"
for port in $EXPLICIT $ALLOCATED; do
  line=$(grep -E -- "^-A KUBE-NODEPORTS .*\"$NS/hostnames-[a-z]+\" .*--dport $port -j KUBE-EXT-" <<<"$RULES") || fail "no KUBE-NODEPORTS rule for port $port"
  echo "$line"
  ext=${line##*-j }
  grep -E -- "^-A $ext .*-j KUBE-MARK-MASQ" <<<"$RULES" || fail "$ext does not mark for masquerade"
  grep -E -- "^-A $ext .*-j KUBE-SVC-" <<<"$RULES" || fail "$ext does not jump to the service chain"
done
fi

shown "nodePort 8080 rejected (valid range 30000-32767); 30007 and allocated $ALLOCATED answer on node1 and node2 from the client via $VIA"
