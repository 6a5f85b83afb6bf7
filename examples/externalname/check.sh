#!/usr/bin/env bash
# ExternalName: a CNAME to my.database.example.com, reached from a pod. See README.md.
source "$(dirname "$0")/../lib.sh"
use_namespace externalname
DIR=$(dirname "$0")
FQDN=my-service.$NS.svc.cluster.local

say "apply the ExternalName Service my-service -> my.database.example.com, and a client pod"
show kubectl apply -n "$NS" -f "$DIR/my-service.yaml"
k wait --for=condition=Ready pod/client --timeout=60s >/dev/null || fail "the client pod is not Ready"
show k get svc my-service
[ -z "$(k get svc my-service -o jsonpath='{.spec.clusterIP}')" ] || fail "an ExternalName Service got a ClusterIP"

say "the cluster DNS answers the Service's name with a CNAME; the target is resolved upstream (the external host's DNS)"
cname() {
  local out
  out=$(inpod client dig +noall +answer "$FQDN" A)
  echo "$out"
  grep -Eq "^$FQDN\.[[:space:]]+[0-9]+[[:space:]]+IN[[:space:]]+CNAME[[:space:]]+my\.database\.example\.com\.$" <<<"$out" &&
    grep -Eq "^my\.database\.example\.com\.[[:space:]]+[0-9]+[[:space:]]+IN[[:space:]]+A[[:space:]]+$EXTERNAL$" <<<"$out"
}
printf '$ kubectl exec -n %s client -- dig +noall +answer %s\n' "$NS" "$FQDN"
eventually 15 cname || fail "dig $FQDN: want a CNAME to my.database.example.com. and its A record $EXTERNAL, got: $OUT"
echo "$OUT"

say "no virtual IP, so no proxy rules: nothing on node1 mentions my-service"
on node1 iptables-save -t nat | grep -F "$NS/my-service" && fail "node1 has proxy rules for an ExternalName Service"
on node1 nft list table ip kube-proxy 2>/dev/null | grep -F "$NS/my-service" && fail "node1 has nftables proxy rules for an ExternalName Service"
echo "(none)"

say "curl the short name from the pod: the search path, the CNAME, then a direct connection to the external host"
printf '$ kubectl exec -n %s client -- curl http://my-service/\n' "$NS"
eventually 15 curl_has pod:client http://my-service/ "external host $EXTERNAL" || fail "curl http://my-service/ from the pod: $OUT"
echo "$OUT"
NODE=$(k get pod client -o jsonpath='{.status.hostIP}')
has "$OUT" "client_address=$NODE:" || fail "the external host did not see the pod's node $NODE (pods leaving the cluster are masqueraded)"
has "$OUT" "host=my-service" || fail "the request's Host was not my-service"

shown "dig $FQDN: CNAME my.database.example.com. -> A $EXTERNAL; curl http://my-service/ from a pod reached the external host (as node $NODE), no proxy rules"
