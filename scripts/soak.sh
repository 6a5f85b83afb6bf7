#!/usr/bin/env bash
# soak.sh: the reliability soak (test/reliability TestSoak) for as long as you
# like: a two-node lab under steady HTTP load through a ClusterIP (from a pod), a
# NodePort and the Ingress (from the lab's client host) while the web Deployment
# scales and rolls every few seconds. It fails on any failed request and on
# growth of the minikit processes' memory, open files or threads, and prints the
# numbers either way. CI runs the same test for 2 minutes.
#
# Network safety: the test runs in a lab (network namespaces it creates and
# removes, even on failure); no packet is sent from the root namespace.
#
# Usage: sudo scripts/soak.sh [--minutes N] [--crash-rounds N]
#   --minutes N       soak duration (default 10)
#   --crash-rounds N  also run the SIGKILL crash test with N rounds (default: skip)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "soak: must run as root" >&2; exit 1; }
minutes=10
crash_rounds=
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) minutes=$2; shift 2 ;;
    --minutes=*) minutes=${1#*=}; shift ;;
    --crash-rounds) crash_rounds=$2; shift 2 ;;
    --crash-rounds=*) crash_rounds=${1#*=}; shift ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "soak: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ "$minutes" =~ ^[1-9][0-9]*$ ]] || { echo "soak: --minutes wants a positive integer" >&2; exit 2; }
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin
run='TestSoak'
if [ -n "$crash_rounds" ]; then
  [[ "$crash_rounds" =~ ^[1-9][0-9]*$ ]] || { echo "soak: --crash-rounds wants a positive integer" >&2; exit 2; }
  export MINIKIT_CRASH_ROUNDS=$crash_rounds
  run='TestSoak|TestCrashRecovery'
fi
export MINIKIT_SOAK_MINUTES=$minutes
# Room for lab setup, the final rollout and (optionally) the crash rounds.
timeout=$((minutes + 15 + ${crash_rounds:-0}))m
exec go test -race -count=1 -timeout "$timeout" -v -run "^(${run})\$" ./test/reliability/
