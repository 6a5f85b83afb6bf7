#!/usr/bin/env bash
# Streaming benchmark in a throwaway lab: median `kubectl exec POD -- true`
# against `kubectl get pod POD` (20 runs each, kubectl 1.32 and Debian's 1.20),
# HTTP requests/s through `kubectl port-forward` against the same load sent
# straight to the pod from its node, and one 512 MiB download through
# port-forward against the same download from the node; the direct runs come
# before and after the forwarded ones and their mean is the reference.
# Needs root and scripts/deps.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
go test -count=1 -run '^$' -bench '^BenchmarkStream$' -benchtime 1x -v ./test/stream/ 2>&1 |
  grep -E 'bench_test.go|BenchmarkStream|^ok|FAIL'
