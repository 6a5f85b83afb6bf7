#!/usr/bin/env bash
# The main job: a demo of minikit end to end in an isolated lab. Everything runs
# inside network namespaces this script creates (no route to the machine's uplink,
# nothing changed in the root namespace), and everything is removed at the end,
# also when a step fails. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root: sudo $0" >&2; exit 1; }
./scripts/deps.sh
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

LAB=${LAB:-mkdemo}
NODE=$LAB-node1
DIR=$(mktemp -d /tmp/minikit-demo.XXXXXX)
BIN=$DIR/minikit
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
# Node processes share the machine's mount namespace (nsenter --net, not ip netns
# exec, whose private mount namespace would hide the pods' netns mounts from others).
in_node() { nsenter --net=/run/netns/"$NODE" "$@"; }
k() { in_node kubectl --kubeconfig "$DIR/data/kubeconfig" "$@"; }

cleanup() {
  set +e
  step "cleaning up"
  if [ -n "${SERVER_PID:-}" ]; then
    k delete deployment,pod --all --wait=true --timeout=30s >/dev/null 2>&1
    kill "$SERVER_PID" 2>/dev/null; wait "$SERVER_PID" 2>/dev/null
  fi
  [ -x "$BIN" ] && in_node "$BIN" down --data-dir "$DIR/data" >/dev/null 2>&1
  ip netns del "$NODE" 2>/dev/null
  rm -rf "$DIR"
  echo "lab $LAB removed"
}
trap cleanup EXIT

if ip netns list | grep -qw "$NODE"; then
  echo "a lab named $LAB already exists (ip netns del $NODE to remove it)" >&2; exit 1
fi

step "building minikit"
go build -o "$BIN" ./minikit

step "creating the isolated lab node $NODE (a network namespace with no route out)"
ip netns add "$NODE"
in_node ip link set lo up
in_node ip link add eth1 type veth peer name eth1-peer
in_node ip link set eth1-peer up
in_node ip addr add 192.168.56.10/24 dev eth1
in_node ip link set eth1 up

step "starting minikit server inside $NODE"
nsenter --net=/run/netns/"$NODE" "$BIN" server --data-dir "$DIR/data" --listen 127.0.0.1:6443 \
  --node-name node1 --node-ip 192.168.56.10 >"$DIR/server.log" 2>&1 &
SERVER_PID=$!
for i in $(seq 100); do [ -f "$DIR/data/kubeconfig" ] && k get --raw /readyz >/dev/null 2>&1 && break; sleep 0.1; done
k get nodes -o wide

step "applying examples/clusterip (the hostnames Deployment, its Service, a client pod)"
k apply -f examples/clusterip/hostnames.yaml
k rollout status deployment/hostnames --timeout=60s
k wait --for=condition=Ready pod/client --timeout=60s
k get pods -o wide
k get svc,endpoints hostnames
k get endpointslices -l kubernetes.io/service-name=hostnames

step "each pod answers its own name (curl from the client pod to every pod IP)"
for ip in $(k get pods -l app=hostnames -o jsonpath='{.items[*].status.podIP}'); do
  printf '%s -> ' "$ip"; in_node "$BIN" --kubeconfig "$DIR/data/kubeconfig" exec client -- curl -s --max-time 2 "http://$ip:9376/"; echo
done
step "inside a pod: its hostname and its own /etc/hosts"
in_node "$BIN" --kubeconfig "$DIR/data/kubeconfig" exec client -- hostname
in_node "$BIN" --kubeconfig "$DIR/data/kubeconfig" exec client -- tail -1 /etc/hosts

step "scaling to 5: the endpoints follow"
k scale deployment hostnames --replicas=5
k rollout status deployment/hostnames --timeout=60s
k get endpoints hostnames
echo
echo "demo finished: every step above ran inside lab namespaces"
