#!/usr/bin/env bash
# LoadBalancer: an EXTERNAL-IP from the stub's pool, reached from the client; pool exhaustion. See README.md.
source "$(dirname "$0")/../lib.sh"
use_namespace loadbalancer
DIR=$(dirname "$0")
POOL_SIZE=11 # minikit lab's pool: 192.168.56.240-192.168.56.250

# external_ip SVC: the address the stub gave a Service (empty while <pending>).
external_ip() { k get svc "$1" -o jsonpath='{.status.loadBalancer.ingress[0].ip}'; }
assigned() { local ip; ip=$(external_ip "$1"); echo "$ip"; [ -n "$ip" ]; }

say "apply hostnames behind a LoadBalancer Service"
show kubectl apply -n "$NS" -f "$DIR/hostnames-lb.yaml"
wait_deploy hostnames
eventually 15 assigned hostnames-lb || fail "hostnames-lb got no EXTERNAL-IP: $(k get svc hostnames-lb 2>&1)"
LB=$OUT
show k get svc hostnames-lb
[[ $LB == 192.168.56.2[45][0-9] ]] || fail "EXTERNAL-IP $LB is not from the lab's pool 192.168.56.240-250"

say "the client reaches the pods at $LB:80; one node answers ARP for it (the stub's speaker)"
# spread: six requests from the client, each a new connection.
spread() { on client sh -c "for i in 1 2 3 4 5 6; do curl -s --max-time 2 http://$LB/; echo; done" | sort | uniq -c; }
reached() { local s; s=$(spread); echo "$s"; grep -q ' hostnames-' <<<"$s" && ! grep -vq ' hostnames-' <<<"$s"; }
printf '$ minikit lab exec client -- curl http://%s/   (6 times)\n' "$LB"
eventually 15 reached || fail "curl http://$LB/ from the client: $OUT"
echo "$OUT"
show on client ip neigh show "$LB"
EVENTS=$(k get events --field-selector involvedObject.name=hostnames-lb -o jsonpath='{range .items[*]}{.reason}: {.message}{"\n"}{end}')
echo "$EVENTS" | grep -E 'IPAllocated|nodeAssigned' || fail "no IPAllocated/nodeAssigned events for hostnames-lb: $EVENTS"
if [ "$(proxy_mode)" = nftables ]; then
  RULE=$(nft_elem node1 service-ips "$LB \. tcp \. 80 : goto external-[^ ,}]+") || fail "node1's service-ips map has no element for $LB . tcp . 80"
else
  RULE=$(on node1 iptables-save -t nat | grep -E -- "^-A KUBE-SERVICES -d $LB/32 .*loadbalancer IP.* -j KUBE-EXT-") || fail "no KUBE-SERVICES rule for $LB"
fi
echo "$RULE"

say "exhaust the pool: fill every free address, then one more Service stays <pending> with a Warning"
used=$(kubectl get svc -A -o jsonpath='{range .items[*]}{.status.loadBalancer.ingress[*].ip}{"\n"}{end}' | grep -c . || true)
free=$((POOL_SIZE - used))
echo "$used of $POOL_SIZE pool addresses in use: creating $free fillers"
for i in $(seq 1 "$free"); do
  printf -- '---\napiVersion: v1\nkind: Service\nmetadata:\n  name: filler-%s\nspec:\n  type: LoadBalancer\n  selector:\n    app: hostnames\n  ports:\n  - port: 80\n    targetPort: 9376\n' "$i"
done | k apply -f - >/dev/null
fillers_assigned() {
  local n
  n=$(k get svc -o jsonpath='{range .items[*]}{.metadata.name} {.status.loadBalancer.ingress[0].ip}{"\n"}{end}' | awk '$1 ~ /^filler-/ && $2 != ""' | wc -l)
  echo "$n of $free fillers have an address"
  [ "$n" = "$free" ]
}
eventually 15 fillers_assigned || fail "$OUT, while the pool had room"
echo "$OUT"
show k create service loadbalancer overflow --tcp=80:9376
warned() { k get events --field-selector involvedObject.name=overflow,type=Warning -o jsonpath='{range .items[*]}{.type} {.reason}: {.message}{"\n"}{end}' | grep AllocationFailed; }
eventually 15 warned || fail "no Warning event for overflow: $(k describe svc overflow)"
WARNING=$OUT
show k get svc overflow
k get svc overflow | grep -q '<pending>' || fail "overflow is not <pending>"
[ -z "$(external_ip overflow)" ] || fail "overflow got an address from a full pool"
echo "$WARNING"
has "$WARNING" "no available IPs" || fail "the warning does not say the pool is exhausted: $WARNING"

say "delete a filler: its address goes to the pending Service"
freed=$(external_ip filler-1)
show k delete svc filler-1
eventually 15 assigned overflow || fail "overflow stayed <pending> after filler-1 freed $freed"
[ "$OUT" = "$freed" ] || fail "overflow got $OUT, want the freed $freed"
show k get svc overflow

shown "hostnames-lb got EXTERNAL-IP $LB from the pool and answered the client; with all $POOL_SIZE addresses taken, overflow stayed <pending> (Warning AllocationFailed) until one was freed"
