#!/usr/bin/env bash
# ClusterIP: the hostnames Deployment behind a virtual IP. See README.md.
source "$(dirname "$0")/../lib.sh"
use_namespace clusterip
DIR=$(dirname "$0")

say "apply the hostnames Deployment (3 serve_hostname pods), its Service and a client pod"
show kubectl apply -n "$NS" -f "$DIR/hostnames.yaml"
wait_deploy hostnames
k wait --for=condition=Ready pod/client --timeout=60s >/dev/null || fail "the client pod is not Ready"
show k get pods -o wide
VIP=$(k get svc hostnames -o jsonpath='{.spec.clusterIP}')
show k get svc hostnames
show k get endpointslices -l kubernetes.io/service-name=hostnames

say "curl the VIP $VIP from the client pod 12 times: kube-proxy's rules spread the connections"
spread() {
  inpod client sh -c "for i in \$(seq 12); do curl -s --max-time 2 http://$VIP/; echo; done" | sort | uniq -c
}
all3() { SPREAD=$(spread); echo "$SPREAD"; [ "$(grep -c ' hostnames-' <<<"$SPREAD")" = 3 ]; }
eventually 20 all3 || fail "12 requests to $VIP did not reach all 3 hostnames pods: $OUT"
echo "$OUT"

if [ "$(proxy_mode)" = nftables ]; then
say "the rules behind it on node1 (nftables mode): services -> the service-ips map -> service-... -> numgen DNAT"
show on node1 nft list chain ip kube-proxy services
ELEM=$(nft_elem node1 service-ips "$VIP \. tcp \. 80 : goto service-[^ ,}]+") || fail "node1's service-ips map has no element for $VIP . tcp . 80"
echo "service-ips: $ELEM"
SVC=${ELEM##*goto }
CHAIN=$(nft_chain node1 "$SVC") || fail "node1 has no chain $SVC"
echo "$CHAIN"
grep -qE -- "numgen random mod 3 (offset [0-9]+ )?map @dnat-endpoints-tcp-[0-9]+" <<<"$CHAIN" ||
  fail "$SVC does not pick one of 3 endpoints with numgen random mod 3 from a dnat-endpoints map"
MAP=$(grep -oE -- "@dnat-endpoints-tcp-[0-9]+" <<<"$CHAIN") && MAP=${MAP#@}
OFF=$(grep -oE -- "offset [0-9]+" <<<"$CHAIN" | cut -d' ' -f2) || true
OFF=${OFF:-0}
for ip in $(pod_ips app=hostnames); do
  nft_elem node1 "$MAP" "(\{|,) *($OFF|$((OFF + 1))|$((OFF + 2))) : $ip \. 9376" >/dev/null ||
    fail "$MAP has no key of $SVC's block ($OFF-$((OFF + 2))) for pod $ip:9376"
done
echo "-> one lookup in the service-ips map finds $SVC; its one rule draws a key $OFF-$((OFF + 2)) (numgen random mod 3) and the map $MAP turns it into a pod: 1/3 each"
PICK="service-ips -> $SVC (numgen random mod 3 in $MAP) -> 3 endpoints"
else
PICK=
say "the rules behind it on node1: KUBE-SERVICES -> KUBE-SVC-... -> KUBE-SEP-... (iptables-save -t nat)"
RULES=$(on node1 iptables-save -t nat | grep -F "clusterip/hostnames:default")
echo "$RULES"
svc_rule=$(grep -E -- "^-A KUBE-SERVICES -d $VIP/32 .* --dport 80 -j KUBE-SVC-" <<<"$RULES") || fail "no KUBE-SERVICES rule matches $VIP:80"
SVC=${svc_rule##*-j }
[ "$(grep -c -- "^-A $SVC .* -j KUBE-SEP-" <<<"$RULES")" = 3 ] || fail "$SVC does not jump to 3 KUBE-SEP chains"
grep -q -- "^-A $SVC .*--probability 0.33333333349 -j KUBE-SEP-" <<<"$RULES" || fail "$SVC has no 1/3 probability rule"
grep -q -- "^-A $SVC .*--probability 0.50000000000 -j KUBE-SEP-" <<<"$RULES" || fail "$SVC has no 1/2 probability rule"
for ip in $(pod_ips app=hostnames); do
  grep -q -- "-j DNAT --to-destination $ip:9376" <<<"$RULES" || fail "no KUBE-SEP DNAT to pod $ip:9376"
done
echo "-> $SVC picks the first endpoint with probability 1/3, else the second with 1/2, else the third: 1/3 each"
PICK="KUBE-SERVICES -> $SVC (probability 1/3, 1/2) -> 3 KUBE-SEP DNATs"
fi

say "the VIP is not an address anywhere: it does not answer ping (only tcp/80 is DNATed)"
if show inpod client ping -c1 -W1 "$VIP"; then fail "ping $VIP answered: a ClusterIP must not"; fi
on node1 ip -o addr show | grep -qF " $VIP/" && fail "node1 has $VIP on an interface"

say "scale to 0: no endpoints, so the filter table REJECTs: curl is refused at once instead of hanging"
show k scale deployment hostnames --replicas=0
# refused: connect fails at once (REJECT sends icmp-port-unreachable: curl exit 7,
# "Couldn't connect" or "Connection refused"), not a timeout (exit 28).
refused() {
  local out rc=0
  out=$(inpod client curl -sS --max-time 3 "http://$VIP/" 2>&1) || rc=$?
  echo "$out"
  [ $rc = 7 ]
}
eventually 30 refused || fail "with no endpoints, curl $VIP was not refused: $OUT"
echo "$ kubectl exec -n $NS client -- curl http://$VIP/"; echo "$OUT"
# The refusal may come from the client's node, or from a pod still closing:
# node1's proxy follows within a sync.
if [ "$(proxy_mode)" = nftables ]; then
  reject_rule() { nft_elem node1 no-endpoint-services "$VIP \. tcp \. 80 [^,}]*: goto reject-chain"; }
  eventually 30 reject_rule || fail "node1's no-endpoint-services map has no reject element for $VIP . tcp . 80"
else
  reject_rule() { on node1 iptables-save -t filter | grep -E -- "^-A KUBE-SERVICES -d $VIP/32 .*\"$NS/hostnames:default has no endpoints\" .*-j REJECT"; }
  eventually 30 reject_rule || fail "node1's filter table has no REJECT rule for $VIP"
fi
echo "$OUT"

shown "3 pods answered the VIP $VIP in turn; $PICK; ping $VIP gets no answer; at 0 replicas a REJECT refuses connections"
