#!/usr/bin/env bash
# minikittest.StartAPI side by side with controller-runtime's envtest on a real
# kube-apiserver and etcd, on the same small test (start, install two CRDs,
# create a custom resource, stop): BenchmarkStartAgainstEnvtest in
# pkg/minikittest/envtestcompat, each side in fresh processes, RUNS times each
# (default 3), then the ratios. kube-apiserver is built from the k8s.io/kubernetes
# v1.37.2 tree that scripts/build-e2e.sh prepares (and caches), etcd from
# go.etcd.io/etcd/server/v3 v3.7.0's etcdmain (etcd's own main), both into
# /var/cache/minikit/envtest/v1.37.2 (MINIKIT_ENVTEST_DIR overrides the cache).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PATH:/usr/local/go/bin
RUNS=${RUNS:-3}
V=v1.37.2
ASSETS=${MINIKIT_ENVTEST_DIR:-/var/cache/minikit/envtest}/$V
mkdir -p "$ASSETS"
if [ ! -x "$ASSETS/kube-apiserver" ]; then
  e2e=$(./scripts/build-e2e.sh)
  echo "building kube-apiserver $V" >&2
  (cd "$(dirname "$e2e")/src" && GOFLAGS=-mod=mod go build -o "$ASSETS/kube-apiserver.tmp" ./cmd/kube-apiserver) >&2
  mv "$ASSETS/kube-apiserver.tmp" "$ASSETS/kube-apiserver"
fi
if [ ! -x "$ASSETS/etcd" ]; then
  echo "building etcd v3.7.0" >&2
  src=$(mktemp -d)
  trap 'rm -rf "$src"' EXIT
  printf 'package main\n\nimport (\n\t"os"\n\n\t"go.etcd.io/etcd/server/v3/etcdmain"\n)\n\nfunc main() { etcdmain.Main(os.Args) }\n' > "$src/main.go"
  (cd "$src" && go mod init etcd >/dev/null 2>&1 && go get go.etcd.io/etcd/server/v3@v3.7.0 >/dev/null 2>&1 &&
    go mod tidy >/dev/null 2>&1 && go build -o "$ASSETS/etcd.tmp" .) >&2
  mv "$ASSETS/etcd.tmp" "$ASSETS/etcd"
fi
bin=$(mktemp)
go test -c -o "$bin" ./pkg/minikittest/envtestcompat
cd pkg/minikittest/envtestcompat
declare -A ns rss
for side in minikit envtest; do
  for _ in $(seq "$RUNS"); do
    # A fresh process per run: the resident set only grows.
    line=$(KUBEBUILDER_ASSETS=$ASSETS "$bin" -test.run '^$' -test.bench "StartAgainstEnvtest/$side\$" -test.benchtime 3x | grep '^Benchmark')
    echo "$line"
    ns[$side]="${ns[$side]:-} $(awk '{print $3}' <<<"$line")"
    rss[$side]="${rss[$side]:-} $(awk '{print $5}' <<<"$line")"
  done
done
rm -f "$bin"
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mt=$(median <<<"${ns[minikit]}") et=$(median <<<"${ns[envtest]}")
mr=$(median <<<"${rss[minikit]}") er=$(median <<<"${rss[envtest]}")
echo "== medians of $RUNS runs: one test (start, 2 CRDs, a custom resource, stop)"
awk -v mt="$mt" -v et="$et" -v mr="$mr" -v er="$er" 'BEGIN {
  printf "minikit StartAPI  %8.0f ms  %6.1f MiB\n", mt/1e6, mr
  printf "envtest           %8.0f ms  %6.1f MiB  (kube-apiserver + etcd)\n", et/1e6, er
  printf "minikit is %.1fx faster, with %.2fx the memory\n", et/mt, mr/er
}'
