#!/usr/bin/env bash
# bench-ingress.sh: minikit's Ingress proxy against Debian's nginx running the nginx.conf
# minikit renders for the same Ingress, side by side in one run.
#
# Everything runs on loopback under /tmp/peers-minikit: three backends answering like
# nginxdemos/hello's plain-text page, the cafe Ingress (/tea -> 3 endpoints, /coffee -> 2,
# TLS with cafe-secret), nginx with minikit's rendered nginx.conf (ingress-nginx's layout:
# upstream keepalive 320, ...), and minikit's proxy built from the same API objects. wrk
# loads each in turn (keep-alive, -t2 -c64), alternating run by run; medians are printed
# with the ratio minikit/nginx. cpu=% is the proxy process's CPU over the run (100% = one
# core).
#
# Usage: scripts/bench-ingress.sh           (run as root or any user; needs go, nginx, wrk)
# Env:   RUNS=5 DURATION=15 WARMUP=3 THREADS=2 CONNS=64 SCHEME=http|https URLPATH=/tea
#        GOMAXPROCS_PROXY= (GOMAXPROCS of minikit's proxy; default: the runtime's)
#        PROXY_ENV="K=V ..." (more environment for minikit's proxy, e.g. GODEBUG)
# Output, last line: nginx_rps=N minikit_rps=N ratio=R nginx_p99=MS minikit_p99=MS
set -u
cd "$(dirname "$0")/.."
DIR=/tmp/peers-minikit
RUNS=${RUNS:-5}
DURATION=${DURATION:-15}
WARMUP=${WARMUP:-3}
THREADS=${THREADS:-2}
CONNS=${CONNS:-64}
SCHEME=${SCHEME:-http}
URLPATH=${URLPATH:-/tea}
HOST_HDR=cafe.example.com
GO=${GO:-go}; NGINX=${NGINX:-nginx}; WRK=${WRK:-wrk}
BE_PORTS="18281 18282 18283"; NGX_PORT=18280; NGX_TLS_PORT=18643; MK_PORT=18290; MK_TLS_PORT=18691

die() { echo "bench-ingress: $*" >&2; exit 1; }
case "${1:-}" in -h|--help) sed -n '2,18p' "$0"; exit 0 ;; esac

if ! command -v "$NGINX" >/dev/null || ! command -v "$WRK" >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "installing nginx wrk with apt-get" >&2
    apt-get install -y -qq nginx wrk >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1; apt-get install -y -qq nginx wrk >/dev/null 2>&1; }
  fi
fi
for t in "$NGINX" "$WRK" "$GO" openssl curl ss; do command -v "$t" >/dev/null || die "missing tool: $t"; done

RES=$DIR/results
. scripts/benchlib.sh

for p in $BE_PORTS $NGX_PORT $NGX_TLS_PORT $MK_PORT $MK_TLS_PORT; do port_busy "$p" && die "127.0.0.1:$p is in use (a previous run still up?)"; done

N=$DIR/nginx
mkdir -p "$N"/logs "$N"/temp "$DIR"/results || die "cannot create $DIR"
"$GO" build -o "$DIR/bench-ingress" ./scripts/bench-ingress || die "go build ./scripts/bench-ingress failed"
cafe_args $BE_PORTS

# The nginx side: minikit renders nginx.conf from the cafe objects.
conf=$("$DIR/bench-ingress" render -dir "$N" -listen "127.0.0.1:$NGX_PORT" -tls-listen "127.0.0.1:$NGX_TLS_PORT" "${CAFE[@]}") || die "render failed"
"$NGINX" -t -q -p "$N" -c "$conf" 2>"$DIR/results/nginx-t.log" || die "nginx -t rejected the rendered nginx.conf: $(tail -3 "$DIR/results/nginx-t.log")"

i=0; BE_PIDS=
for p in $BE_PORTS; do
  i=$((i + 1))
  "$DIR/bench-ingress" backend -addr "127.0.0.1:$p" -name "backend-$i" >"$DIR/results/backend-$p.log" 2>&1 &
  PIDS+=($!); BE_PIDS="${BE_PIDS:+$BE_PIDS }$!"
done
"$NGINX" -p "$N" -c "$conf" >"$DIR/results/nginx.out" 2>&1 &
NGX_PID=$!; PIDS+=("$NGX_PID")
env ${GOMAXPROCS_PROXY:+GOMAXPROCS=$GOMAXPROCS_PROXY} ${PROXY_ENV:-} "$DIR/bench-ingress" proxy -addr "127.0.0.1:$MK_PORT" -tls-addr "127.0.0.1:$MK_TLS_PORT" "${CAFE[@]}" \
  >"$DIR/results/minikit.log" 2>&1 &
MK_PID=$!; PIDS+=("$MK_PID")
for p in $BE_PORTS $NGX_PORT $NGX_TLS_PORT $MK_PORT $MK_TLS_PORT; do wait_port "$p" || die "nothing listens on 127.0.0.1:$p (see $DIR/results/)"; done

if [ "$SCHEME" = https ]; then
  NGX_URL=https://127.0.0.1:$NGX_TLS_PORT$URLPATH; MK_URL=https://127.0.0.1:$MK_TLS_PORT$URLPATH
else
  NGX_URL=http://127.0.0.1:$NGX_PORT$URLPATH; MK_URL=http://127.0.0.1:$MK_PORT$URLPATH
fi
check() {
  local body
  body=$(curl -sk --max-time 5 -H "Host: $HOST_HDR" "$1") || die "request to $1 failed"
  case "$body" in *"Server name: backend-"*"URI: $URLPATH"*) ;; *) die "unexpected answer from $1: $body" ;; esac
}
check "$NGX_URL"; check "$MK_URL"

side_pids() { case "$1" in nginx) tree "$NGX_PID" ;; minikit) echo "$MK_PID" ;; esac; }

echo "# $("$NGINX" -v 2>&1 | sed 's/^nginx version: //'); $("$WRK" -v 2>&1 | head -1 | awk '{print "wrk", $2}'); $("$GO" version | awk '{print $3}'); $(nproc) cores"
echo "# wrk -t$THREADS -c$CONNS -d${DURATION}s --latency -H 'Host: $HOST_HDR' URL; runs=$RUNS alternating; nginx=$NGX_URL minikit=$MK_URL"
if [ "$WARMUP" -gt 0 ]; then
  wrk_run nginx "$NGX_URL" "$WARMUP" warmup-nginx >/dev/null
  wrk_run minikit "$MK_URL" "$WARMUP" warmup-minikit >/dev/null
fi
echo "# loadavg before: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A R
for r in $(seq 1 "$RUNS"); do
  # Alternate which side goes first, so a drift in machine load hits both alike.
  order="nginx minikit"; [ $((r % 2)) = 0 ] && order="minikit nginx"
  for side in $order; do
    url=$NGX_URL; [ "$side" = minikit ] && url=$MK_URL
    set -- $(wrk_run "$side" "$url" "$DURATION" "run$r-$side")
    R[$side,rps]="${R[$side,rps]:-} $1"; R[$side,p50]="${R[$side,p50]:-} $2"; R[$side,p90]="${R[$side,p90]:-} $3"
    R[$side,p99]="${R[$side,p99]:-} $4"; R[$side,cpu]="${R[$side,cpu]:-} $6"
    echo "run=$r side=$side rps=$1 p50=${2}ms p90=${3}ms p99=${4}ms errors=$5 cpu=$6% backends_cpu=$7%"
    [ "$5" -gt 0 ] && echo "WARNING: run $r $side had $5 errors (see $DIR/results/run$r-$side.txt)" >&2
    sleep 1
  done
done
echo "# loadavg after: $(cut -d' ' -f1-3 /proc/loadavg)"
declare -A M
for side in nginx minikit; do for k in rps p50 p90 p99 cpu; do M[$side,$k]=$(median ${R[$side,$k]}); done; done
ratio=$(awk -v a="${M[minikit,rps]}" -v b="${M[nginx,rps]}" 'BEGIN{ if (b > 0) printf "%.3f", a/b; else print "NA" }')
echo "nginx_p50=${M[nginx,p50]} minikit_p50=${M[minikit,p50]} nginx_p90=${M[nginx,p90]} minikit_p90=${M[minikit,p90]} nginx_cpu=${M[nginx,cpu]}% minikit_cpu=${M[minikit,cpu]}% rps_spread_nginx=$(spread ${R[nginx,rps]}) rps_spread_minikit=$(spread ${R[minikit,rps]})"
echo "nginx_rps=${M[nginx,rps]} minikit_rps=${M[minikit,rps]} ratio=$ratio nginx_p99=${M[nginx,p99]} minikit_p99=${M[minikit,p99]}"
