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

PIDS=()
cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
  for p in "${PIDS[@]}"; do
    for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$p" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$p" 2>/dev/null
    wait "$p" 2>/dev/null
  done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

port_busy() { [ -n "$(ss -Hltn "sport = :$1" 2>/dev/null)" ]; }
wait_port() { local i; for i in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
for p in $BE_PORTS $NGX_PORT $NGX_TLS_PORT $MK_PORT $MK_TLS_PORT; do port_busy "$p" && die "127.0.0.1:$p is in use (a previous run still up?)"; done

N=$DIR/nginx
mkdir -p "$N"/logs "$N"/temp "$DIR"/results || die "cannot create $DIR"
"$GO" build -o "$DIR/bench-ingress" ./scripts/bench-ingress || die "go build ./scripts/bench-ingress failed"
if [ ! -s "$DIR/cafe.crt" ]; then
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$DIR/cafe.key" -out "$DIR/cafe.crt" -days 365 \
    -subj "/CN=$HOST_HDR" -addext "subjectAltName=DNS:$HOST_HDR" >/dev/null 2>&1 || die "openssl req failed"
fi
eps() { local s= p; for p in "$@"; do s="${s:+$s,}127.0.0.1:$p"; done; echo "$s"; }
set -- $BE_PORTS
CAFE=(-tea "$(eps "$1" "$2" "$3")" -coffee "$(eps "$1" "$2")" -cert "$DIR/cafe.crt" -key "$DIR/cafe.key")

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

HZ=$(getconf CLK_TCK)
tree() { local p c; for p in "$@"; do [ -d "/proc/$p" ] || continue; echo "$p"; c=$(cat /proc/"$p"/task/*/children 2>/dev/null); [ -n "$c" ] && tree $c; done; }
ticks() { local t=0 p v; for p in "$@"; do v=$(awk '{print $14+$15}' "/proc/$p/stat" 2>/dev/null) && t=$((t + ${v:-0})); done; echo "$t"; }
side_pids() { case "$1" in nginx) tree "$NGX_PID" ;; minikit) echo "$MK_PID" ;; esac; }
# wrk_run SIDE URL SECONDS LABEL -> "rps p50 p90 p99 errors cpu% backends_cpu%"
wrk_run() {
  local side=$1 url=$2 secs=$3 out=$DIR/results/$4.txt pids t0 b0 t1 b1
  pids=$(side_pids "$side"); t0=$(ticks $pids); b0=$(ticks $BE_PIDS)
  "$WRK" -t"$THREADS" -c"$CONNS" -d"${secs}s" --latency -H "Host: $HOST_HDR" "$url" >"$out" 2>&1
  t1=$(ticks $pids); b1=$(ticks $BE_PIDS)
  awk -v d=$((t1 - t0)) -v bd=$((b1 - b0)) -v hz="$HZ" -v s="$secs" '
    function ms(v) { if (v ~ /us$/) return v / 1000; if (v ~ /ms$/) return v + 0; if (v ~ /m$/) return v * 60000; if (v ~ /s$/) return v * 1000; return v }
    /^ +50%/ { p50 = ms($2) } /^ +90%/ { p90 = ms($2) } /^ +99%/ { p99 = ms($2) }
    /^Requests\/sec:/ { rps = $2 }
    /Non-2xx or 3xx responses:/ { err += $NF }
    /Socket errors:/ { for (i = 3; i <= NF; i++) if ($i ~ /^[0-9]+,?$/) err += $i + 0 }
    END { if (rps == "") rps = 0; printf "%.0f %.3f %.3f %.3f %d %.0f %.0f\n", rps, p50, p90, p99, err, d/hz/s*100, bd/hz/s*100 }' "$out"
}
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{ if (NR==0) {print "NA"; exit} if (NR%2) print a[(NR+1)/2]; else printf "%.10g\n", (a[NR/2]+a[NR/2+1])/2 }'; }
spread() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{ if (NR<2||a[1]==0) {print "NA"; exit} printf "%.0f%%\n", (a[NR]-a[1])/a[1]*100 }'; }

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
