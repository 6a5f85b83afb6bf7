#!/usr/bin/env bash
# The main job: a demo of minikit end to end in an isolated lab. Everything runs
# inside network namespaces that `minikit lab` creates (no route to the machine's
# uplink, nothing changed in the root namespace but a loopback forwarder to the
# API), and everything is removed at the end, also when a step fails. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root: sudo $0" >&2; exit 1; }
./scripts/deps.sh
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

LAB=${LAB:-demo}
DIR=$(mktemp -d /tmp/minikit-demo.XXXXXX)
BIN=$DIR/minikit
export KUBECONFIG=$DIR/lab/kubeconfig
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
mk() { "$BIN" "$@"; }
# on HOST, curl URL until it answers (rules follow the API within about a second).
curl_from() {
  local host=$1 url=$2 out
  for _ in $(seq 40); do
    if [ "$host" = pod ]; then out=$(mk exec client -- curl -s --max-time 2 "$url") && break
    else out=$(mk lab exec --name "$LAB" --dir "$DIR/lab" "$host" -- curl -s --max-time 2 "$url") && break; fi
    sleep 0.25
  done
  echo "$out"
}

cleanup() {
  set +e
  step "cleaning up: minikit lab down"
  [ -x "$BIN" ] && mk lab down --name "$LAB" --dir "$DIR/lab"
  rm -rf "$DIR"
  echo "lab $LAB removed"
}
trap cleanup EXIT

step "building minikit"
go build -o "$BIN" ./minikit

step "minikit lab up: 2 nodes, a client and an external host, as network namespaces"
mk lab up --name "$LAB" --nodes 2 --dir "$DIR/lab"
kubectl get nodes -o wide

step "applying examples/clusterip (the hostnames Deployment, its Service, a client pod)"
kubectl apply -f examples/clusterip/hostnames.yaml
kubectl rollout status deployment/hostnames --timeout=60s
kubectl wait --for=condition=Ready pod/client --timeout=60s
kubectl get pods -o wide
kubectl get svc,endpoints hostnames
kubectl get endpointslices -l kubernetes.io/service-name=hostnames

step "each pod answers its own name (curl from the client pod to every pod IP, across nodes)"
for ip in $(kubectl get pods -l app=hostnames -o jsonpath='{.items[*].status.podIP}'); do
  printf '%s -> ' "$ip"; mk exec client -- curl -s --max-time 2 "http://$ip:9376/"; echo
done
step "inside a pod: its hostname and its own /etc/hosts"
mk exec client -- hostname
mk exec client -- tail -1 /etc/hosts

step "ClusterIP: curl the Service's virtual IP from the client pod; kube-proxy's rules spread the requests"
VIP=$(kubectl get svc hostnames -o jsonpath='{.spec.clusterIP}')
for i in 1 2 3 4 5 6; do curl_from pod "http://$VIP/"; done
step "the rules behind it on node1: KUBE-SERVICES -> KUBE-SVC-... -> KUBE-SEP-... (iptables-save -t nat)"
mk lab exec --name "$LAB" --dir "$DIR/lab" node1 -- iptables-save -t nat | grep -E 'hostnames|^-A KUBE-(SERVICES|MARK-MASQ|POSTROUTING)' | head -20

step "NodePort: expose it on every node and curl it from the lab's client host (a laptop next to the cluster)"
kubectl expose deployment hostnames --name hostnames-np --type NodePort --port 80 --target-port 9376
NP=$(kubectl get svc hostnames-np -o jsonpath='{.spec.ports[0].nodePort}')
kubectl get svc hostnames-np
for n in 192.168.56.10 192.168.56.11; do
  printf 'client -> %s:%s -> ' "$n" "$NP"; curl_from client "http://$n:$NP/"
done

step "headless (clusterIP: None): no virtual IP, no rules; the endpoints are the pod IPs"
kubectl create service clusterip hostnames-headless --clusterip=None --tcp=9376:9376
kubectl patch svc hostnames-headless -p '{"spec":{"selector":{"app":"hostnames"}}}'
kubectl get svc hostnames-headless
kubectl get endpoints hostnames-headless

step "cluster DNS: names resolve from a pod, through the kube-dns Service (10.96.0.10)"
mk exec client -- cat /etc/resolv.conf
for name in hostnames hostnames.default.svc.cluster.local hostnames-headless.default.svc.cluster.local; do
  printf '%-46s -> ' "$name"; mk exec client -- dig +short +search "$name" | tr '\n' ' '; echo
done
printf '%-46s -> ' "_default._tcp.hostnames (SRV)"; mk exec client -- dig +short SRV _default._tcp.hostnames.default.svc.cluster.local

step "ExternalName: a CNAME to a machine outside the cluster (the lab's external host)"
kubectl create service externalname my-database --external-name my.database.example.com
mk exec client -- dig +search my-database | grep -A3 'ANSWER SECTION'
curl_from pod "http://my-database.default.svc.cluster.local/"

step "LoadBalancer: the stub gives an EXTERNAL-IP from the lab's pool; the client reaches it"
kubectl expose deployment hostnames --name hostnames-lb --type LoadBalancer --port 80 --target-port 9376
for _ in $(seq 40); do LB=$(kubectl get svc hostnames-lb -o jsonpath='{.status.loadBalancer.ingress[0].ip}'); [ -n "$LB" ] && break; sleep 0.25; done
kubectl get svc hostnames-lb
printf 'client -> %s:80 -> ' "$LB"; curl_from client "http://$LB/"

step "scaling to 5: the endpoints and the rules follow"
kubectl scale deployment hostnames --replicas=5
kubectl rollout status deployment/hostnames --timeout=60s
kubectl get endpoints hostnames
mk lab exec --name "$LAB" --dir "$DIR/lab" node1 -- iptables-save -t nat | grep 'hostnames:default' | grep -c -- '-j DNAT' | xargs echo "KUBE-SEP DNAT rules for hostnames (one per endpoint):"

step "scaled to zero: the ClusterIP rejects connections (no hang)"
kubectl scale deployment hostnames --replicas=0
kubectl wait --for=delete pod -l app=hostnames --timeout=60s
for _ in $(seq 20); do mk exec client -- curl -s -S --max-time 3 "http://$VIP/" 2>&1 | grep -q refused && break; sleep 0.25; done
mk exec client -- curl -s -S --max-time 3 "http://$VIP/" || true
echo
echo "demo finished: every step above ran inside lab namespaces"
