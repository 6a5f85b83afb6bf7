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

step "scaling to 5: the endpoints follow"
kubectl scale deployment hostnames --replicas=5
kubectl rollout status deployment/hostnames --timeout=60s
kubectl get endpoints hostnames
kubectl logs deployment/hostnames --tail=2
echo
echo "demo finished: every step above ran inside lab namespaces"
