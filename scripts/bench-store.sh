#!/usr/bin/env bash
# bench-store.sh: minikit's datastores side by side: bbolt (the default) and embedded etcd with
# 1 and 3 members (etcdserver: TLS with client certificates, fsync, members on 127.0.0.1).
#
# Runs etcdserver's BenchmarkDatastores once (-benchtime 1x). For each datastore it measures,
# at the store's interface and through the API server (apiserver over the store, client-go
# over HTTP on loopback):
#   creates/s and create p99 from 16 concurrent clients (2,000 1-KiB keys / 1,000 ConfigMaps),
#   the p99 of 20 lists of everything, and the p99 delay from a create's return to its watch
#   event (a watch opened before the creates).
# Then it prints one table with each etcd figure's ratio to bbolt's (throughputs: etcd/bolt,
# higher is better; latencies: etcd/bolt, lower is better).
#
# Environment (defaults): GO=go  COUNT=1 (runs of the benchmark; each is printed)
# Needs no root; everything lives in the Go test's temporary directories.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
GO=${GO:-go}
COUNT=${COUNT:-1}
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT

echo "# go test ./internal/etcdserver -bench BenchmarkDatastores -benchtime 1x -count $COUNT" >&2
(cd "$ROOT" && "$GO" test ./internal/etcdserver -run '^$' -bench BenchmarkDatastores -benchtime 1x -count "$COUNT" -timeout 30m) | tee "$OUT" >&2

python3 - "$OUT" <<'PY'
import re, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r'BenchmarkDatastores/(\w+?)(-\d+)?\s+\d+\s+\d+ ns/op\s+(.*)', line)
    if not m:
        continue
    vals = re.findall(r'([\d.]+) (\S+)', m.group(3))
    rows.setdefault(m.group(1), []).append({unit: float(v) for v, unit in vals})
if 'bolt' not in rows:
    sys.exit("no bolt result in the benchmark output")
# One run, or the median of COUNT runs.
def med(runs, unit):
    xs = sorted(r[unit] for r in runs)
    return xs[len(xs) // 2]
units = ["store-creates/s", "store-create-p99-ms", "store-list2000-p99-ms", "store-watch-delay-p99-ms",
         "api-creates/s", "api-create-p99-ms", "api-list1000-p99-ms", "api-watch-delay-p99-ms"]
names = [n for n in ("bolt", "etcd1", "etcd3") if n in rows]
print("%-26s" % "metric" + "".join("%12s" % n for n in names) + "".join("%14s" % (n + "/bolt") for n in names if n != "bolt"))
for u in units:
    b = med(rows["bolt"], u)
    line = "%-26s" % u + "".join("%12.2f" % med(rows[n], u) for n in names)
    for n in names:
        if n != "bolt":
            line += "%14s" % ("%.2f" % (med(rows[n], u) / b) if b else "-")
    print(line)
PY
