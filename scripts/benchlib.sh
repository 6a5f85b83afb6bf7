# benchlib.sh: what scripts/bench-ingress.sh and scripts/bench-gateway.sh share,
# sourced by both (not run on its own). The caller sets DIR (the working
# directory, /tmp/peers-minikit), RES (where results go), HOST_HDR, WRK, THREADS,
# CONNS, BE_PIDS (the backends' PIDs) and side_pids SIDE (the PIDs whose CPU
# counts for a side), and defines die.

# PIDS are the processes the benchmark started: cleanup stops them (TERM, then
# KILL after two seconds) on exit, also on failure or Ctrl-C.
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

# cafe_args PORT...: CAFE, the cafe's flags for the benchmark's Go program: tea on
# the three backend ports, coffee on the first two, a self-signed cafe-secret
# for HOST_HDR (made once in DIR).
cafe_args() {
  if [ ! -s "$DIR/cafe.crt" ]; then
    openssl req -x509 -newkey rsa:2048 -nodes -keyout "$DIR/cafe.key" -out "$DIR/cafe.crt" -days 365 \
      -subj "/CN=$HOST_HDR" -addext "subjectAltName=DNS:$HOST_HDR" >/dev/null 2>&1 || die "openssl req failed"
  fi
  CAFE=(-tea "$(eps "$1" "$2" "$3")" -coffee "$(eps "$1" "$2")" -cert "$DIR/cafe.crt" -key "$DIR/cafe.key")
}
# eps PORT...: the loopback endpoints host:port,host:port,...
eps() { local s= p; for p in "$@"; do s="${s:+$s,}127.0.0.1:$p"; done; echo "$s"; }

HZ=$(getconf CLK_TCK)
# tree PID...: the PIDs and all their descendants; ticks PID...: their CPU ticks.
tree() { local p c; for p in "$@"; do [ -d "/proc/$p" ] || continue; echo "$p"; c=$(cat /proc/"$p"/task/*/children 2>/dev/null); [ -n "$c" ] && tree $c; done; }
ticks() { local t=0 p v; for p in "$@"; do v=$(awk '{print $14+$15}' "/proc/$p/stat" 2>/dev/null) && t=$((t + ${v:-0})); done; echo "$t"; }
# wrk_run SIDE URL SECONDS LABEL -> "rps p50 p90 p99 errors cpu% backends_cpu%"
wrk_run() {
  local side=$1 url=$2 secs=$3 out=$RES/$4.txt pids t0 b0 t1 b1
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
# median N...; spread N...: (max-min)/min as a percentage.
median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{ if (NR==0) {print "NA"; exit} if (NR%2) print a[(NR+1)/2]; else printf "%.10g\n", (a[NR/2]+a[NR/2+1])/2 }'; }
spread() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{ if (NR<2||a[1]==0) {print "NA"; exit} printf "%.0f%%\n", (a[NR]-a[1])/a[1]*100 }'; }
