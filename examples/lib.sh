# Shared by every examples/*/check.sh (sourced, not run). A check runs the
# commands a student types against a running lab, prints them and what they
# answered, and exits non-zero with a "FAIL: ..." line when the answer is wrong.
#
# The interface (all optional when the lab has the default name and directory):
#   MINIKIT     the minikit binary        (default: minikit in PATH, else bin/minikit)
#   LAB         the lab's name            (default: lab, as `minikit lab up` names it)
#   LAB_DIR     the lab's directory       (default: /var/lib/minikit-lab/$LAB)
#   KUBECONFIG  the lab's kubeconfig      (default: $LAB_DIR/kubeconfig)
#   KEEP=1      leave the example's objects in place for exploring afterwards
#   MINIKIT_HOSTS_VIA  how `on HOST` reaches a lab host: lab (minikit lab exec, the
#               default) or ssh (as root, to the host of that name: the Vagrant VMs)
# Run as root (minikit lab exec enters network namespaces):
#   go build -o bin/minikit ./cmd/minikit && sudo bin/minikit lab up
#   sudo examples/clusterip/check.sh
#
# Every check works in a Kubernetes namespace of its own, deleted when the check
# ends (also on failure), and undoes whatever it changed on a lab host, so the
# checks run in any order, and again, in one lab.

set -euo pipefail
export PATH=$PATH:/usr/sbin:/sbin

EXAMPLES=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -z "${MINIKIT:-}" ]; then
  MINIKIT=$(command -v minikit || true)
  [ -n "$MINIKIT" ] || MINIKIT=$EXAMPLES/../bin/minikit
fi
LAB=${LAB:-lab}
# On the Vagrant VMs (docs/vagrant.md) the lab hosts are VMs of the same names and
# addresses: scripts/provision.sh writes /etc/minikit/examples.env there, saying
# to reach them over SSH and where the cluster's kubeconfig is. Read when no lab
# was named; what the caller set wins.
if [ -z "${LAB_DIR:-}" ] && [ -r /etc/minikit/examples.env ]; then
  while IFS='=' read -r k v; do
    case $k in
    MINIKIT_HOSTS_VIA) MINIKIT_HOSTS_VIA=${MINIKIT_HOSTS_VIA:-$v} ;;
    KUBECONFIG) KUBECONFIG=${KUBECONFIG:-$v} ;;
    esac
  done </etc/minikit/examples.env
fi
MINIKIT_HOSTS_VIA=${MINIKIT_HOSTS_VIA:-lab}
case $MINIKIT_HOSTS_VIA in lab | ssh) ;; *) echo "FAIL: MINIKIT_HOSTS_VIA=$MINIKIT_HOSTS_VIA: want lab or ssh" >&2; exit 1 ;; esac
LAB_DIR=${LAB_DIR:-/var/lib/minikit-lab/$LAB}
export KUBECONFIG=${KUBECONFIG:-$LAB_DIR/kubeconfig}
NS=${NS:-default}
# Lab addresses (minikit lab's Vagrant-like underlay).
NODE1=192.168.56.10 NODE2=192.168.56.11 CLIENT=192.168.56.100 EXTERNAL=192.168.56.200

[ "$(id -u)" = 0 ] || { echo "FAIL: run as root (minikit enters network namespaces): sudo $0" >&2; exit 1; }
[ -x "$MINIKIT" ] || { echo "FAIL: no minikit binary at '$MINIKIT'; set MINIKIT=/path/to/minikit" >&2; exit 1; }
[ -r "$KUBECONFIG" ] || { echo "FAIL: no lab kubeconfig at $KUBECONFIG; start one with: minikit lab up --name $LAB (or set LAB, LAB_DIR, KUBECONFIG)" >&2; exit 1; }

# say prints a step: what the student is about to look at.
say() { printf '\n== %s\n' "$*"; }

# show prints a command as a student would type it, then runs it (its output is
# shown, its status returned).
show() {
  local labflags= a words=()
  [ "$LAB" = lab ] || labflags=" --name $LAB"
  for a in "$@"; do
    if [[ $a =~ ^[A-Za-z0-9_./:=,@+%-]+$ ]]; then words+=("$a"); else words+=("'$a'"); fi
  done
  case $1 in
  k) printf '$ kubectl -n %s %s\n' "$NS" "${words[*]:1}" ;;
  inpod) printf '$ kubectl exec -n %s %s -- %s\n' "$NS" "$2" "${words[*]:2}" ;;
  on)
    if [ "$MINIKIT_HOSTS_VIA" = ssh ]; then printf '$ ssh root@%s -- %s\n' "$2" "${words[*]:2}"
    else printf '$ minikit lab exec%s %s -- %s\n' "$labflags" "$2" "${words[*]:2}"; fi ;;
  *) printf '$ %s\n' "${words[*]}" ;;
  esac
  "$@"
}

# fail ends the check: what was expected, and what was seen.
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

# shown is the check's last word: one line saying what it demonstrated, which
# scripts/tour.sh prints after PASS.
shown() { printf 'SHOWN: %s\n' "$*"; }

# k is kubectl in the example's namespace.
k() { kubectl -n "$NS" "$@"; }

# on HOST CMD... runs a command on a lab host (node1, node2, client, external):
# in the lab's namespace, or over SSH on the VM of that name (its remote shell,
# bash, gets the words quoted back as they were).
on() {
  local h=$1; shift
  if [ "$MINIKIT_HOSTS_VIA" = ssh ]; then
    ssh -o BatchMode=yes -o StrictHostKeyChecking=accept-new -o LogLevel=ERROR "root@$h" -- "$(printf '%q ' "$@")"
  else
    "$MINIKIT" lab exec --name "$LAB" --dir "$LAB_DIR" "$h" -- "$@"
  fi
}

# inpod POD CMD... runs a command inside a pod of the example's namespace, as a
# student would: kubectl exec, through the API server to the node agent's
# streaming port (its exit status is the command's).
inpod() { local p=$1; shift; kubectl exec -n "$NS" "$p" -- "$@"; }

# eventually SECONDS CMD... retries CMD (quietly) until it succeeds; its output
# is left in OUT. Rules and DNS records follow the API within about a second.
OUT=
eventually() {
  local secs=$1; shift
  local deadline=$((SECONDS + secs))
  while :; do
    if OUT=$("$@" 2>&1); then return 0; fi
    [ $SECONDS -lt $deadline ] || return 1
    sleep 0.2
  done
}

# proxy_mode prints the mode of the lab's proxies as node1's kernel shows it:
# nftables when node1 holds kube-proxy's nftables table (ip kube-proxy), else
# iptables. When PROXY_MODE is set (the tour sets it to the mode it asked
# `minikit lab up --proxy-mode` for), a lab in the other mode fails the check.
proxy_mode() {
  local m=iptables
  on node1 nft list table ip kube-proxy >/dev/null 2>&1 && m=nftables
  [ -z "${PROXY_MODE:-}" ] || [ "$PROXY_MODE" = "$m" ] || fail "the lab's proxy runs in $m mode, not $PROXY_MODE"
  echo "$m"
}

# nft_elem NODE MAP REGEX: the element of one of kube-proxy's nftables maps on a
# node that matches REGEX (grep -oE over `nft list map ip kube-proxy MAP`).
nft_elem() { on "$1" nft list map ip kube-proxy "$2" | tr -d '\n\t' | grep -oE -- "$3"; }

# nft_chain NODE CHAIN: `nft list chain` of one of kube-proxy's chains on a node.
nft_chain() { on "$1" nft list chain ip kube-proxy "$2"; }

# node_src NODE IP: the source address NODE's own packets to IP leave with (the
# src of `ip route get IP` on NODE), which MASQUERADE gives a packet it SNATs:
# for a pod on another node, the node's underlay address with the host-gw pod
# network, its flannel.1 address (its pod subnet's .0) with vxlan.
node_src() { on "$1" ip -o route get "$2" | sed -n 's/.* src \([0-9.]*\).*/\1/p'; }

# has TEXT NEEDLE: does TEXT contain NEEDLE?
has() { [[ $1 == *"$2"* ]]; }

# curl_has HOST|pod:NAME URL NEEDLE [CURL ARGS...]: curl from a lab host or a pod
# succeeds and the answer contains NEEDLE.
curl_has() {
  local from=$1 url=$2 needle=$3; shift 3
  local out
  if [[ $from == pod:* ]]; then out=$(inpod "${from#pod:}" curl -sS --max-time 2 "$@" "$url") || { echo "$out"; return 1; }
  else out=$(on "$from" curl -sS --max-time 2 "$@" "$url") || { echo "$out"; return 1; }; fi
  echo "$out"
  has "$out" "$needle"
}

CLEANUPS=()
# on_exit CMD: run CMD (a string) when the check ends, before the namespace goes.
on_exit() { CLEANUPS+=("$1"); }

cleanup() {
  local rc=$?
  set +e
  if [ "${KEEP:-}" = 1 ]; then
    echo "KEEP=1: leaving namespace $NS; remove it with: kubectl delete namespace $NS"
  else
    for ((i = ${#CLEANUPS[@]} - 1; i >= 0; i--)); do eval "${CLEANUPS[$i]}" >/dev/null 2>&1; done
    [ "$NS" = default ] || kubectl delete namespace "$NS" --ignore-not-found --timeout=60s >/dev/null
  fi
  exit $rc
}

# use_namespace NAME: the check's own namespace, created fresh (a leftover from
# an interrupted run is removed first) and deleted when the check ends.
use_namespace() {
  NS=$1
  local out
  if ! out=$(kubectl create namespace "$NS" 2>&1); then
    has "$out" AlreadyExists || fail "kubectl create namespace $NS: $out"
    kubectl delete namespace "$NS" --timeout=60s >/dev/null
    kubectl create namespace "$NS" >/dev/null
  fi
  trap cleanup EXIT
  trap 'exit 130' INT TERM
}

# wait_deploy NAME: every replica of a Deployment is Ready (its pods are endpoints).
wait_deploy() { k rollout status "deployment/$1" --timeout=60s >/dev/null || fail "deployment $1 did not become ready: $(k get pods -o wide 2>&1)"; }

# pod_ips SELECTOR: the IPs of the Ready pods matching a label selector, sorted.
pod_ips() {
  k get pods -l "$1" -o jsonpath='{range .items[*]}{.status.podIP}{" "}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' |
    awk '$2 == "True" {print $1}' | sort
}
