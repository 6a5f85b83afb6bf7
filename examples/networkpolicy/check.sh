#!/usr/bin/env bash
# NetworkPolicy: the documentation's test-network-policy and a default deny,
# proven with real connections from pods, the rules in node2's filter table,
# and minikit trace of an allowed and a denied connection. See README.md.
source "$(dirname "$0")/../lib.sh"
use_namespace networkpolicy
DIR=$(dirname "$0")
OTHER=networkpolicy-myproject
on_exit "kubectl delete namespace $OTHER --ignore-not-found --timeout=60s"

say "the pods: db, frontend and intruder on node2; outsider and backup on node1; client in namespace $OTHER (project=myproject)"
kubectl delete namespace "$OTHER" --ignore-not-found --timeout=60s >/dev/null
show kubectl apply -n "$NS" -f "$DIR/pods.yaml"
show kubectl apply -f "$DIR/myproject.yaml"
for p in db frontend intruder outsider backup; do
  k wait --for=condition=Ready "pod/$p" --timeout=60s >/dev/null || fail "pod $p is not Ready: $(k get pods -o wide 2>&1)"
done
kubectl -n "$OTHER" wait --for=condition=Ready pod/client --timeout=60s >/dev/null || fail "pod $OTHER/client is not Ready"
show k get pods -o wide
CIDRS=$(kubectl get nodes -o jsonpath='{range .items[*]}{.metadata.name}={.spec.podCIDR} {end}')
echo "pod CIDRs: $CIDRS"
has "$CIDRS" "node1=10.244.0.0/24" && has "$CIDRS" "node2=10.244.1.0/24" ||
  fail "the manifests assume node1=10.244.0.0/24 and node2=10.244.1.0/24, the lab has: $CIDRS"
ip_of() { kubectl -n "${2:-$NS}" get pod "$1" -o jsonpath='{.status.podIP}'; }
DB=$(ip_of db) FRONTEND=$(ip_of frontend) BACKUP=$(ip_of backup)
VIP=$(k get svc db -o jsonpath='{.spec.clusterIP}')

# conn [NS/]POD ADDR: agnhost connect from a pod, as upstream's NetworkPolicy
# tests probe (exit 0: connected; a TCP reset prints REFUSED).
conn() {
  local ns=$NS p=$1
  [[ $p == */* ]] && ns=${p%%/*} p=${p#*/}
  kubectl exec -n "$ns" "$p" -- /agnhost connect "$2" --timeout=1s 2>&1
}
# cmdline [NS/]POD ADDR: the kubectl command conn runs, as the student types it.
cmdline() {
  local ns=$NS p=$1
  [[ $p == */* ]] && ns=${p%%/*} p=${p#*/}
  printf '$ kubectl exec -n %s %s -- /agnhost connect %s --timeout=1s   -> ' "$ns" "$p" "$2"
}
# allowed/denied [NS/]POD ADDR: wait (rules follow the API within a sync) until
# the connection opens / is refused, and print what the student would see.
allowed() {
  cmdline "$1" "$2"
  eventually 20 conn "$1" "$2" || fail "$1 -> $2 should connect: $OUT"
  echo "connected"
}
refused() { ! conn "$@"; }
denied() {
  cmdline "$1" "$2"
  eventually 20 refused "$1" "$2" || fail "$1 -> $2 should be refused, it connected"
  echo "${OUT%%$'\n'command terminated*}"
}

say "no policy yet: every pod reaches db"
allowed intruder "$DB:6379"

say "apply the documentation's test-network-policy (addresses moved into the lab's pod network)"
show k apply -f "$DIR/test-network-policy.yaml"
show k get netpol
show k describe netpol test-network-policy

say "ingress to db: TCP 6379 from the ipBlock (node1's pods), namespace project=myproject, role=frontend"
allowed frontend "$DB:6379"
allowed frontend "$VIP:6379"
allowed outsider "$DB:6379"
allowed "$OTHER/client" "$DB:6379"
denied intruder "$DB:6379"
denied intruder "$VIP:6379"
denied frontend "$DB:80"
echo "-> intruder is on node2 (10.244.1.0/24, the except), has no role and is not in project=myproject; port 80 is not 6379"

say "egress from db: TCP 5978 to node1's pod CIDR only (replies to allowed clients pass through conntrack)"
allowed db "$BACKUP:5978"
denied db "$BACKUP:80"
denied db "$FRONTEND:80"

say "the rules on node2 (db's node): FORWARD -> KUBE-NWPLCY-FORWARD -> KUBE-POD-FW-... -> KUBE-NWPLCY-... (iptables-save -t filter)"
RULES=$(on node2 iptables-save -t filter | grep -E -- '^(:|-A )(KUBE-NWPLCY-|KUBE-POD-FW-)|-j KUBE-NWPLCY-FORWARD')
echo "$RULES"
# The jump is FORWARD's first rule: nothing (not even kube-proxy's ACCEPT of
# packets it marked) is decided before the policies are.
first_is_hook() { on node2 iptables -S FORWARD | grep -m1 -- '^-A FORWARD' | grep -- '-j KUBE-NWPLCY-FORWARD'; }
eventually 40 first_is_hook || fail "node2's first FORWARD rule is not the jump to KUBE-NWPLCY-FORWARD: $(on node2 iptables -S FORWARD)"
echo "$ minikit lab exec node2 -- iptables -S FORWARD | head -2"; on node2 iptables -S FORWARD | head -2
grep -q -- '^-A KUBE-NWPLCY-FORWARD .*RELATED,ESTABLISHED' <<<"$RULES" || fail "KUBE-NWPLCY-FORWARD does not let established flows through first"
grep -q -- '"networkpolicy/test-network-policy ingress rule 0".*0x10000' <<<"$RULES" || fail "no rule marks 0x10000 for test-network-policy ingress rule 0"
grep -q -- '"networkpolicy/test-network-policy egress rule 0".*0x10000' <<<"$RULES" || fail "no rule marks 0x10000 for test-network-policy egress rule 0"
grep -q -- '"networkpolicy/db ingress: no NetworkPolicy allows".*--reject-with tcp-reset' <<<"$RULES" || fail "db's ingress chain does not end with a REJECT (tcp-reset)"
grep -q -- '"networkpolicy/db egress: no NetworkPolicy allows".*-j REJECT' <<<"$RULES" || fail "db's egress chain does not end with a REJECT"
echo "-> db's KUBE-POD-FW chains jump to the policy's KUBE-NWPLCY chains, which mark what a rule allows (0x10000) and return; unmarked packets are REJECTed"

say "minikit trace: the verdict at the hop where it is taken"
trace() { "$MINIKIT" trace --kubeconfig "$KUBECONFIG" --lab "$LAB" -n "$NS" "$@" 2>&1; }
printf '$ minikit trace -n %s pod/frontend svc/db:6379\n' "$NS"
ALLOW=$(trace pod/frontend svc/db:6379) || fail "minikit trace pod/frontend svc/db:6379: $ALLOW"
echo "$ALLOW"
has "$ALLOW" "=> ACCEPT 10.244.1." || fail "the trace of frontend -> db does not end in an ACCEPT to db"
has "$ALLOW" "ingress of $NS/db allowed by $NS/test-network-policy ingress rule 0" || fail "the trace of frontend -> db does not name test-network-policy ingress rule 0 as the verdict"
printf '$ minikit trace -n %s pod/intruder svc/db:6379\n' "$NS"
DENY=$(trace pod/intruder svc/db:6379) || fail "minikit trace pod/intruder svc/db:6379: $DENY"
echo "$DENY"
has "$DENY" "=> REJECT" || fail "the trace of intruder -> db does not end in the REJECT"
has "$DENY" "ingress of $NS/db rejected: $NS/db ingress: no NetworkPolicy allows" || fail "the trace of intruder -> db does not say that no NetworkPolicy allows it"

say "default deny: every pod of the namespace is isolated for ingress; policies add up"
allowed outsider "$FRONTEND:80"
show k apply -f "$DIR/default-deny.yaml"
denied outsider "$FRONTEND:80"
denied "$OTHER/client" "$BACKUP:80"
allowed frontend "$DB:6379"
printf '$ minikit lab exec node2 -- curl -s http://%s/   -> ' "$FRONTEND"
eventually 10 on node2 curl -sS --max-time 2 "http://$FRONTEND/" || fail "node2 cannot reach its own pod frontend under default deny: $OUT"
echo "$OUT"
echo "-> a node always reaches its own pods (the kubelet's probes come from there)"

say "delete the policies: access is back"
show k delete netpol default-deny-ingress test-network-policy
allowed intruder "$DB:6379"
allowed outsider "$FRONTEND:80"

shown "test-network-policy lets frontend, node1's pods and project=myproject reach db:6379 and refuses intruder (tcp-reset) and port 80; db may only reach 10.244.0.0/24:5978; FORWARD -> KUBE-NWPLCY-FORWARD -> KUBE-POD-FW -> KUBE-NWPLCY (mark 0x10000) else REJECT; trace names the rule or the REJECT; default deny adds up; deleting restores access"
