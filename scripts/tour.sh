#!/usr/bin/env bash
# The tour: every example under examples/, end to end, in an isolated lab.
#
#   sudo ./scripts/tour.sh                  # all of them
#   sudo ./scripts/tour.sh dns ingress      # some of them
#   sudo VERBOSE=1 ./scripts/tour.sh        # also print what each check showed
#   sudo ./scripts/tour.sh --proxy-mode nftables   # the lab's kube-proxy in nftables mode
#   sudo ./scripts/tour.sh --pod-network vxlan     # pods reach other nodes' pods through Flannel's VXLAN
#   sudo ./scripts/tour.sh --servers 3             # three nodes, all servers: an HA control plane on embedded etcd
#   sudo ./scripts/tour.sh --datastore etcd        # the server on an external etcd (run on the lab's external host)
#   sudo ./scripts/tour.sh --ip-family dual        # a dual-stack lab: pods, Services and nodes of both families
#
# It installs what is missing (scripts/deps.sh; MINIKIT_SKIP_DEPS=1 skips that),
# builds minikit, brings up a two-node `minikit lab` (network namespaces with no
# route off the machine: nodes, a client host, an external host), runs each
# example's check.sh and prints one PASS or FAIL line per example (with the
# check's output on failure), then removes the lab, also on failure or Ctrl-C.
# Nothing is changed in the machine's root network namespace but a loopback
# forwarder to the lab's API while it runs. Run as root.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "run as root: sudo $0" >&2; exit 1; }
[ "${MINIKIT_SKIP_DEPS:-}" = 1 ] || ./scripts/deps.sh
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin

# The order a student would read them in; examples not listed here run after them.
ORDER=(pod-network clusterip headless dns nodeport snat-and-local externalname externalips loadbalancer ingress gateway networkpolicy)
PROXY_MODE=${PROXY_MODE:-iptables}
POD_NETWORK=${POD_NETWORK:-host-gw}
SERVERS=${SERVERS:-1}
DATASTORE=${DATASTORE:-bolt}
IP_FAMILY=${IP_FAMILY:-ipv4}
args=()
while [ $# -gt 0 ]; do
  case $1 in
  --proxy-mode) [ $# -ge 2 ] || { echo "--proxy-mode needs a value: iptables or nftables" >&2; exit 2; }; PROXY_MODE=$2; shift 2 ;;
  --proxy-mode=*) PROXY_MODE=${1#*=}; shift ;;
  --pod-network) [ $# -ge 2 ] || { echo "--pod-network needs a value: host-gw or vxlan" >&2; exit 2; }; POD_NETWORK=$2; shift 2 ;;
  --pod-network=*) POD_NETWORK=${1#*=}; shift ;;
  --servers) [ $# -ge 2 ] || { echo "--servers needs a value: 1, 3, 5 or 7" >&2; exit 2; }; SERVERS=$2; shift 2 ;;
  --servers=*) SERVERS=${1#*=}; shift ;;
  --datastore) [ $# -ge 2 ] || { echo "--datastore needs a value: bolt or etcd" >&2; exit 2; }; DATASTORE=$2; shift 2 ;;
  --datastore=*) DATASTORE=${1#*=}; shift ;;
  --ip-family) [ $# -ge 2 ] || { echo "--ip-family needs a value: ipv4, ipv6 or dual" >&2; exit 2; }; IP_FAMILY=$2; shift 2 ;;
  --ip-family=*) IP_FAMILY=${1#*=}; shift ;;
  *) args+=("$1"); shift ;;
  esac
done
case $PROXY_MODE in iptables | nftables) ;; *) echo "invalid --proxy-mode \"$PROXY_MODE\": must be iptables or nftables" >&2; exit 2 ;; esac
export PROXY_MODE # examples/lib.sh checks the lab runs in this mode
case $POD_NETWORK in host-gw | vxlan) ;; *) echo "invalid --pod-network \"$POD_NETWORK\": must be host-gw or vxlan" >&2; exit 2 ;; esac
case $SERVERS in 1 | 3 | 5 | 7) ;; *) echo "invalid --servers \"$SERVERS\": must be 1, 3, 5 or 7" >&2; exit 2 ;; esac
case $DATASTORE in bolt | etcd) ;; *) echo "invalid --datastore \"$DATASTORE\": must be bolt or etcd" >&2; exit 2 ;; esac
case $IP_FAMILY in ipv4 | ipv6 | dual) ;; *) echo "invalid --ip-family \"$IP_FAMILY\": must be ipv4, ipv6 or dual" >&2; exit 2 ;; esac
export IP_FAMILY # for the checks: the lab's address families
# Two nodes, as the book draws; with an HA control plane every node is a server.
NODES=2
[ "$SERVERS" = 1 ] || NODES=$SERVERS
set -- ${args[@]+"${args[@]}"}
examples=()
if [ $# -gt 0 ]; then
  for e in "$@"; do
    e=${e%/}; e=${e#examples/}
    [ -x "examples/$e/check.sh" ] || { echo "no examples/$e/check.sh" >&2; exit 2; }
    examples+=("$e")
  done
else
  for e in "${ORDER[@]}"; do [ -x "examples/$e/check.sh" ] && examples+=("$e"); done
  for f in examples/*/check.sh; do
    e=$(basename "$(dirname "$f")")
    [[ " ${examples[*]} " == *" $e "* ]] || examples+=("$e")
  done
fi

export LAB=${LAB:-tour}
TMP=$(mktemp -d /tmp/minikit-tour.XXXXXX)
export MINIKIT=$TMP/minikit
export LAB_DIR=$TMP/lab
export KUBECONFIG=$LAB_DIR/kubeconfig
START=$SECONDS
bold() { if [ -t 1 ]; then printf '\033[1m%s\033[0m\n' "$*"; else printf '%s\n' "$*"; fi; }

cleanup() {
  local rc=$?
  set +e
  trap - INT TERM
  if [ -x "$MINIKIT" ] && [ -e "$LAB_DIR/lab.json" ]; then
    "$MINIKIT" lab down --name "$LAB" --dir "$LAB_DIR" || { echo "minikit lab down --name $LAB --dir $LAB_DIR failed" >&2; rc=1; }
  fi
  rm -rf "$TMP"
  echo "lab $LAB removed; the tour took $((SECONDS - START))s"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

bold "== building minikit"
go build -o "$MINIKIT" ./cmd/minikit

# The doctor's lines say what this machine lacks and how to get it, before a
# lab up would fail with a netlink error; its warnings are worth a look too.
bold "== minikit doctor"
if ! doctor=$("$MINIKIT" doctor 2>&1); then
  printf '%s\n' "$doctor" >&2
  echo "the tour stops here: install or enable what the missing lines name, then run it again" >&2
  exit 1
fi
printf '%s\n' "$doctor" | grep -v '^ok ' || true

bold "== minikit lab up --name $LAB --nodes $NODES --servers $SERVERS --datastore $DATASTORE --proxy-mode $PROXY_MODE --pod-network $POD_NETWORK --ip-family $IP_FAMILY"
"$MINIKIT" lab up --name "$LAB" --nodes "$NODES" --servers "$SERVERS" --datastore "$DATASTORE" --proxy-mode "$PROXY_MODE" --pod-network "$POD_NETWORK" --ip-family "$IP_FAMILY" --dir "$LAB_DIR" --kubeconfig-merge=false

bold "== ${#examples[@]} examples (each: sudo examples/NAME/check.sh against a running lab; see its README.md)"
passed=0 failed=()
for e in "${examples[@]}"; do
  log=$TMP/$e.log
  t0=$SECONDS
  if timeout --foreground 180 "examples/$e/check.sh" >"$log" 2>&1; then rc=0; else rc=$?; fi
  took=$((SECONDS - t0))
  what=$(sed -n 's/^SHOWN: //p' "$log" | tail -1)
  if [ $rc = 0 ] && [ -n "$what" ]; then
    passed=$((passed + 1))
    printf 'PASS  %-15s — %s (%ds)\n' "$e" "$what" "$took"
    [ "${VERBOSE:-}" != 1 ] || sed 's/^/      /' "$log"
  else
    failed+=("$e")
    why=$(sed -n 's/^FAIL: //p' "$log" | head -1)
    if [ -z "$why" ] && [ $rc = 0 ]; then why="check.sh printed no SHOWN: line"; fi
    if [ -z "$why" ]; then why="check.sh exited $rc"; fi
    printf 'FAIL  %-15s — %s (%ds)\n' "$e" "$why" "$took"
    sed 's/^/      /' "$log"
  fi
  [ $rc != 130 ] || exit 130
done

echo
if [ ${#failed[@]} -eq 0 ]; then
  bold "all ${passed} examples passed"
else
  bold "${#failed[@]} of ${#examples[@]} examples failed: ${failed[*]}"
  exit 1
fi
