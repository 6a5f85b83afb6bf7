#!/usr/bin/env bash
# Builds upstream e2e.test and the ginkgo CLI that runs it in parallel processes from the
# k8s.io/kubernetes module, unmodified, into a cache dir (ginkgo beside e2e.test); a second
# run reuses the binaries.
#
# The module zip lacks staging/, and its go.mod replaces every k8s.io/<staging> module with
# ./staging/src/k8s.io/<name>; each replace is pointed at the published k8s.io/<name> v0.X.Y
# instead, vendor/ and go.work are dropped, and `go test -c ./test/e2e` builds the suite.
# Nothing of the test code is changed. Prints the binary's path on stdout.
set -euo pipefail
V=${E2E_VERSION:-v1.37.2}
S=${V/v1./v0.}
DIR=${MINIKIT_E2E_DIR:-/var/cache/minikit/e2e}/$V
export PATH=$PATH:/usr/local/go/bin GOFLAGS=-mod=mod
if [ -x "$DIR/e2e.test" ] && [ -x "$DIR/ginkgo" ]; then echo "$DIR/e2e.test"; exit 0; fi
mkdir -p "$DIR"
MOD=$(go mod download -json "k8s.io/kubernetes@$V" | python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
if [ ! -f "$DIR/src/.prepared" ]; then
  rm -rf "$DIR/src"
  cp -r "$MOD" "$DIR/src"
  chmod -R u+w "$DIR/src"
  (cd "$DIR/src" && rm -rf vendor go.work go.work.sum &&
    sed -i -E "s#^(\s*)(k8s.io/[a-z0-9-]+) => ./staging/src/k8s.io/[a-z0-9-]+#\1\2 => \2 $S#" go.mod &&
    touch .prepared)
fi
# The ginkgo CLI, from the ginkgo module version the kubernetes module requires: it runs
# e2e.test in parallel processes (--procs), as upstream's own jobs do.
if [ ! -x "$DIR/ginkgo" ]; then
  (cd "$DIR/src" && go build -o "$DIR/ginkgo.tmp" github.com/onsi/ginkgo/v2/ginkgo) >&2
  mv "$DIR/ginkgo.tmp" "$DIR/ginkgo"
fi
if [ ! -x "$DIR/e2e.test" ]; then
  echo "building e2e.test $V in $DIR (about 30 minutes cold on 2 cores)" >&2
  (cd "$DIR/src" && go test -c -o "$DIR/e2e.test.tmp" ./test/e2e) >&2
  mv "$DIR/e2e.test.tmp" "$DIR/e2e.test"
fi
echo "$DIR/e2e.test"
