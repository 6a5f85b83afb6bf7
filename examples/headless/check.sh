#!/usr/bin/env bash
# Headless Service: DNS returns the pod IPs, and follows scaling. See README.md.
source "$(dirname "$0")/../lib.sh"
use_namespace headless
DIR=$(dirname "$0")

say "apply the hostnames Deployment, the headless Service hostnames-headless (clusterIP: None) and a client pod"
show kubectl apply -n "$NS" -f "$DIR/hostnames-headless.yaml"
wait_deploy hostnames
k wait --for=condition=Ready pod/client --timeout=60s >/dev/null || fail "the client pod is not Ready"
show k get svc hostnames-headless
[ "$(k get svc hostnames-headless -o jsonpath='{.spec.clusterIP}')" = None ] || fail "hostnames-headless has a ClusterIP"
show k get pods -l app=hostnames -o wide

NAME=hostnames-headless.$NS.svc.cluster.local
# answers_are N: dig from the client pod returns exactly the N Ready pod IPs.
answers_are() {
  local want got
  want=$(pod_ips app=hostnames)
  got=$(inpod client dig +short "$NAME" A | sort)
  echo "$got"
  [ "$(wc -w <<<"$want")" = "$1" ] && [ "$got" = "$want" ]
}

say "dig from the client pod: one A record per Ready pod, the pods' own IPs (no VIP)"
eventually 20 answers_are 3 || fail "dig $NAME answered '$OUT', want the 3 pod IPs $(pod_ips app=hostnames | xargs)"
show inpod client dig +noall +answer "$NAME"
THREE=$(echo $OUT)

say "no proxy rules: nothing in KUBE-SERVICES on node1 mentions hostnames-headless"
on node1 iptables-save -t nat | grep -F "$NS/hostnames-headless" && fail "node1 has proxy rules for a headless Service"
on node1 nft list table ip kube-proxy 2>/dev/null | grep -F "$NS/hostnames-headless" && fail "node1 has nftables proxy rules for a headless Service"
echo "(none)"

say "the name leads straight to a pod: curl hostnames-headless:9376 (the search path completes the name)"
eventually 10 curl_has pod:client "http://hostnames-headless:9376/" hostnames- || fail "curl hostnames-headless:9376: $OUT"
echo "$OUT"

say "scale to 1: the answer shrinks to the one remaining pod"
show k scale deployment hostnames --replicas=1
eventually 30 answers_are 1 || fail "after scaling to 1, dig answered '$OUT', want $(pod_ips app=hostnames | xargs)"
show inpod client dig +short "$NAME"
ONE=$(echo $OUT)

say "scale to 4: the new pods appear in the answer as soon as they are Ready"
show k scale deployment hostnames --replicas=4
wait_deploy hostnames
eventually 30 answers_are 4 || fail "after scaling to 4, dig answered '$OUT', want $(pod_ips app=hostnames | xargs)"
show inpod client dig +short "$NAME"

shown "dig $NAME answered the pod IPs ($THREE), then $ONE at 1 replica and 4 addresses at 4; no VIP, no proxy rules"
