#!/usr/bin/env bash
# Builds upstream e2e.test (and ginkgo's JUnit-capable runner is e2e.test itself) from the
# k8s.io/kubernetes module, unmodified, into a cache dir; a second run reuses the binary.
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
if [ -x "$DIR/e2e.test" ]; then echo "$DIR/e2e.test"; exit 0; fi
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
echo "building e2e.test $V in $DIR (about 30 minutes cold on 2 cores)" >&2
(cd "$DIR/src" && go test -c -o "$DIR/e2e.test.tmp" ./test/e2e) >&2
mv "$DIR/e2e.test.tmp" "$DIR/e2e.test"
echo "$DIR/e2e.test"
