#!/usr/bin/env bash
# The pictures in the documentation, drawn by `minikit lab graph` from a real lab:
# docs/lab.svg (the README's), and for every example examples/NAME/lab.svg (the
# lab with the example applied) and, where the example has a trace,
# examples/NAME/trace.svg (the path of that trace over the lab). The pod-network
# example is drawn last, in a second lab of its own with the VXLAN pod network on
# a routed underlay (`lab up --pod-network vxlan --topology routed`): the router
# between the two segments and the tunnel between the nodes' flannel.1.
#
#   sudo ./scripts/pictures.sh           # draw them again (write the files)
#   sudo ./scripts/pictures.sh --check   # compare with the files instead: fail,
#                                        # naming each picture that is not current
#
# It builds minikit, brings up a two-node lab (iptables mode, as the book shows),
# applies each example's manifests in the example's namespace in a fixed order
# (pod addresses depend on what ran before: the node's IPAM hands them out
# round-robin), waits until the example's trace gives the expected answer, draws,
# deletes the namespace, and removes the lab at the end, also on failure.
# The pictures use `lab graph --stable`: pods named by owner and ordinal, no MACs,
# interface indexes or veth hash names, allocated ClusterIPs and NodePorts by
# role, so that drawing them again in another lab gives the same files. Run as
# root; nothing is changed in the root network namespace but a loopback forwarder
# to the lab's API while it runs.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root: sudo $0" >&2; exit 1; }
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin
MODE=write
case ${1:-} in
--check) MODE=check ;;
"") ;;
*) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

LAB=${LAB:-pictures}
TMP=$(mktemp -d /tmp/minikit-pictures.XXXXXX)
MINIKIT=$TMP/minikit
LAB_DIR=$TMP/lab
export KUBECONFIG=$LAB_DIR/kubeconfig
cleanup() {
  local rc=$?
  set +e
  trap - INT TERM
  if [ -x "$MINIKIT" ] && [ -e "$LAB_DIR/lab.json" ]; then
    "$MINIKIT" lab down --name "$LAB" --dir "$LAB_DIR" || { echo "minikit lab down --name $LAB failed" >&2; rc=1; }
  fi
  rm -rf "$TMP"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

go build -o "$MINIKIT" ./cmd/minikit
"$MINIKIT" lab up --name "$LAB" --nodes 2 --dir "$LAB_DIR" --kubeconfig-merge=false >/dev/null
echo "lab $LAB is up"

stale=()
# draw FILE [lab graph flags...]: draw the lab into FILE (or compare with it).
draw() {
  local file=$1; shift
  "$MINIKIT" lab graph --name "$LAB" --dir "$LAB_DIR" --stable -o svg "$@" >"$TMP/new.svg"
  if [ "$MODE" = check ]; then
    if cmp -s "$TMP/new.svg" "$file"; then
      echo "current  $file"
    else
      echo "STALE    $file"
      diff <(tr '>' '\n' <"$file" 2>/dev/null) <(tr '>' '\n' <"$TMP/new.svg") | head -20 || true
      stale+=("$file")
    fi
  else
    mv "$TMP/new.svg" "$file"
    echo "wrote    $file"
  fi
}

# settle NS JQ FROM TO [trace flags...]: wait (up to 60 s) until `minikit trace
# FROM TO -o json` satisfies the jq filter JQ: the proxies have written the
# example's rules.
settle() {
  local ns=$1 want=$2; shift 2
  local deadline=$((SECONDS + 60)) out
  while :; do
    if out=$("$MINIKIT" trace --lab "$LAB" --kubeconfig "$KUBECONFIG" -n "$ns" "$@" -o json 2>&1) &&
      jq -e "$want" <<<"$out" >/dev/null 2>&1; then
      return 0
    fi
    if [ $SECONDS -ge $deadline ]; then
      echo "minikit trace -n $ns $* never satisfied $want:" >&2
      echo "$out" | head -c 2000 >&2
      return 1
    fi
    sleep 0.5
  done
}

# ready NS: every pod of the namespace is Ready.
ready() {
  local deadline=$((SECONDS + 120))
  [ -n "$(kubectl -n "$1" get pods -o name)" ] || return 0
  until kubectl -n "$1" wait --for=condition=Ready pod --all --timeout=60s >/dev/null 2>&1; do
    [ $SECONDS -lt $deadline ] || { kubectl -n "$1" get pods -o wide >&2; echo "pods of $1 not Ready" >&2; return 1; }
    sleep 1
  done
}

# example NAME MANIFEST...: a namespace NAME with the example's manifests:
# the Deployments first, Ready, then the rest, so that which node a bare pod
# lands on (the scheduler spreads by count) does not depend on a race with
# the Deployments' pods.
example() {
  local ns=$1 f; shift
  kubectl create namespace "$ns" >/dev/null
  for f in "$@"; do
    kubectl create --dry-run=client -o json -n "$ns" -f "examples/$ns/$f" |
      jq -c '[.items // [.]] | flatten | .[] | select(.kind == "Deployment")' >"$TMP/deployments.json"
    # One at a time: two Deployments' pods created at once interleave.
    while read -r d; do
      kubectl apply -n "$ns" -f - <<<"$d" >/dev/null
      kubectl -n "$ns" rollout status deployment "$(jq -r .metadata.name <<<"$d")" --timeout=120s >/dev/null
      ready "$ns"
    done <"$TMP/deployments.json"
  done
  for f in "$@"; do
    jq '{apiVersion: "v1", kind: "List", items: ([.items // [.]] | flatten | map(select(.kind != "Deployment")))}' \
      <(kubectl create --dry-run=client -o json -n "$ns" -f "examples/$ns/$f") | kubectl apply -n "$ns" -f - >/dev/null
  done
  ready "$ns"
}

# done_with NAME [NAMESPACE...]: delete the example's namespaces and wait
# until they (and their pods) are gone, so the next example starts alike.
done_with() {
  kubectl delete namespace "$@" --wait=true --timeout=120s >/dev/null
}

nodeport_of() { kubectl -n "$1" get svc "$2" -o jsonpath="{.spec.ports[0].nodePort}"; }

# pick NS [--node-of NODE] FROM TO [trace flags]: the index of the trace's
# path to the endpoint with the lowest address (on NODE, if given): the one
# the stable pictures name alike whatever address it has.
pick() {
  local ns=$1 node=; shift
  if [ "$1" = --node-of ]; then node=$2; shift 2; fi
  "$MINIKIT" trace --lab "$LAB" --kubeconfig "$KUBECONFIG" -n "$ns" "$@" -o json |
    jq --arg node "$node" '[.paths | to_entries[] | select($node == "" or .value.endpoint.node == $node)]
      | sort_by(.value.dst | split(":")[0] | split(".") | map(tonumber)) | .[0].key // 0'
}

# The order of scripts/tour.sh: the addresses in the pictures depend on it.

# clusterip: a pod's connection to the ClusterIP, DNATed to one of 3 pods.
example clusterip hostnames.yaml
settle clusterip '.paths | length == 3' pod/client svc/hostnames
draw examples/clusterip/lab.svg
draw examples/clusterip/trace.svg -n clusterip --trace pod/client svc/hostnames --path "$(pick clusterip pod/client svc/hostnames)"
done_with clusterip

example headless hostnames-headless.yaml
draw examples/headless/lab.svg
done_with headless

example dns dns.yaml
draw examples/dns/lab.svg
done_with dns

# nodeport: the client to node2:30007; the README's picture: to node1:30007,
# DNATed to the pod on node2 and masqueraded on the way.
example nodeport hostnames-nodeport.yaml
settle nodeport '.paths | length == 2' client node2:30007
draw examples/nodeport/lab.svg
draw examples/nodeport/trace.svg -n nodeport --trace client node2:30007 --path "$(pick nodeport client node2:30007)"
settle nodeport '.paths | length == 2' client node1:30007
draw docs/lab.svg -n nodeport --trace client node1:30007 --path "$(pick nodeport --node-of node2 client node1:30007)"
done_with nodeport

# snat-and-local: the client to node2's NodePort, the pod on node1: SNAT via node2.
example snat-and-local echo.yaml
NP=$(nodeport_of snat-and-local echo)
settle snat-and-local '.paths[0].dnat' client "node2:$NP"
draw examples/snat-and-local/lab.svg
draw examples/snat-and-local/trace.svg -n snat-and-local --trace client "node2:$NP" --path "$(pick snat-and-local client "node2:$NP")"
done_with snat-and-local

example externalname my-service.yaml
draw examples/externalname/lab.svg
done_with externalname

# externalips: the client to the external IP, which a route brings to node1.
example externalips my-service.yaml
settle externalips '.paths[0].dnat' client 80.11.12.10:80 --node node1
draw examples/externalips/lab.svg
draw examples/externalips/trace.svg -n externalips --trace client 80.11.12.10:80 --node node1 \
  --path "$(pick externalips client 80.11.12.10:80 --node node1)"
done_with externalips

example loadbalancer hostnames-lb.yaml
LB=$(kubectl -n loadbalancer get svc hostnames-lb -o jsonpath='{.status.loadBalancer.ingress[0].ip}' 2>/dev/null || true)
deadline=$((SECONDS + 60))
while [ -z "$LB" ]; do
  [ $SECONDS -lt $deadline ] || { echo "hostnames-lb got no LoadBalancer IP" >&2; exit 1; }
  sleep 0.5
  LB=$(kubectl -n loadbalancer get svc hostnames-lb -o jsonpath='{.status.loadBalancer.ingress[0].ip}')
done
settle loadbalancer '.paths[0].dnat' client "$LB:80"
draw examples/loadbalancer/lab.svg
draw examples/loadbalancer/trace.svg -n loadbalancer --trace client "$LB:80" --path "$(pick loadbalancer client "$LB:80")"
done_with loadbalancer

# ingress: the client to node2's ingress NodePort: on to a node's controller.
example ingress cafe.yaml cafe-ingress.yaml
HTTP=$(kubectl -n ingress-nginx get svc ingress-nginx-controller -o jsonpath='{.spec.ports[?(@.name=="http")].nodePort}')
settle ingress '.paths[0].dnat' client "node2:$HTTP"
draw examples/ingress/lab.svg
draw examples/ingress/trace.svg -n ingress --trace client "node2:$HTTP" --path "$(pick ingress client "node2:$HTTP")"
done_with ingress

# networkpolicy: test-network-policy applied; the intruder's connection to db
# is rejected on node2, where db runs.
kubectl create namespace networkpolicy >/dev/null
kubectl apply -n networkpolicy -f examples/networkpolicy/pods.yaml >/dev/null
kubectl apply -f examples/networkpolicy/myproject.yaml >/dev/null
kubectl apply -n networkpolicy -f examples/networkpolicy/test-network-policy.yaml >/dev/null
ready networkpolicy
ready networkpolicy-myproject
settle networkpolicy '.paths[0].verdict == "REJECT"' pod/intruder svc/db:6379
draw examples/networkpolicy/lab.svg
draw examples/networkpolicy/trace.svg -n networkpolicy --trace pod/intruder svc/db:6379
done_with networkpolicy networkpolicy-myproject

# pod-network: a second lab, vxlan on two segments joined by a router (the first
# lab goes first: one lab at a time). The client pod to the echo pod's address:
# out node1's flannel.1, encapsulated to node2's address, across the router.
"$MINIKIT" lab down --name "$LAB" --dir "$LAB_DIR" >/dev/null
LAB=$LAB-vx
LAB_DIR=$TMP/lab-vx
export KUBECONFIG=$LAB_DIR/kubeconfig
"$MINIKIT" lab up --name "$LAB" --nodes 2 --dir "$LAB_DIR" --kubeconfig-merge=false \
  --pod-network vxlan --topology routed >/dev/null
echo "lab $LAB is up (vxlan, routed)"
example pod-network pods.yaml
ECHO=$(kubectl -n pod-network get pod echo -o jsonpath='{.status.podIP}')
settle pod-network '.paths[0].route.kind == "vxlan"' pod/client "$ECHO:8080"
# Both nodes' FDB entries for the other: the tunnel the picture draws.
deadline=$((SECONDS + 60))
until "$MINIKIT" lab graph --name "$LAB" --dir "$LAB_DIR" -o json |
  jq -e '[.links[] | select(.kind == "vxlan")] | length == 1' >/dev/null; do
  [ $SECONDS -lt $deadline ] || { echo "lab $LAB: no VXLAN tunnel between node1 and node2 in lab graph" >&2; exit 1; }
  sleep 0.5
done
draw examples/pod-network/lab.svg
draw examples/pod-network/trace.svg -n pod-network --trace pod/client "$ECHO:8080"
done_with pod-network

if [ ${#stale[@]} -gt 0 ]; then
  echo "${#stale[@]} pictures are not current: ${stale[*]}; draw them again with: sudo ./scripts/pictures.sh" >&2
  exit 1
fi
