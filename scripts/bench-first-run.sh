#!/usr/bin/env bash
# A newcomer's first run: what `./scripts/tour.sh` installs and how long it takes
# on a machine that has none of the packages the scripts install, from a clean
# clone, with no Go build or module cache.
#
#   sudo ./scripts/bench-first-run.sh
#   sudo PREINSTALL="ca-certificates git" ./scripts/bench-first-run.sh
#
# How: debootstrap --variant=minbase makes a fresh Debian 12 root (from
# deb.debian.org, as test/provision does); Go is assumed on a machine
# (scripts/deps.sh says so), so the host's /usr/local/go is copied in; HEAD of
# this repository is cloned into /root/minikit there (committed work only), and
# the machine's own CAs (/usr/local/share/ca-certificates) are put where
# update-ca-certificates finds them. PREINSTALL names packages the machine is
# taken to have already (installed before counting; none by default). Then, in
# private mount and PID namespaces (the root bind-mounted on itself; /proc,
# /sys, /dev mounted, /run a tmpfs), pivot_root into it and run ./scripts/tour.sh as root with
# empty GOCACHE and GOMODCACHE in the root: the first Go build downloads the
# modules from the Go proxy as a newcomer's does. apt and the Go proxy use the
# machine's network (the tour runs in the root network namespace; nothing there
# is changed); the tour's lab is network namespaces, as on the host, whose mount
# points live in the root's /run.
#
# It prints the packages the tour installed (count and list, from dpkg's
# database before and after), whether any is a kernel, QEMU, libvirt or
# Chromium, the tour's seconds (each line of its output stamped with the seconds
# since it started: deps, build, lab up, examples), the examples that passed,
# and the load average at start and end (the machine may be busy). It removes
# everything it made, also on failure or Ctrl-C: any network namespace the tour
# left is deleted; killing the PID namespace's init ends every process the tour
# started, and with them the mounts, which never show outside; then the root.
# Exits non-zero when the tour failed or a budget (under 60 packages, no
# kernel, QEMU, libvirt or Chromium, under 300 s) was missed.
set -euo pipefail
export PATH=$PATH:/usr/local/go/bin:/usr/sbin:/sbin
[ "$(id -u)" = 0 ] || { echo "run as root: sudo $0" >&2; exit 1; }
for tool in debootstrap unshare chroot git; do
  command -v "$tool" >/dev/null || { echo "$tool is needed (scripts/deps.sh test installs debootstrap)" >&2; exit 1; }
done
[ -x /usr/local/go/bin/go ] || { echo "no Go in /usr/local/go to copy into the root" >&2; exit 1; }
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
rev=$(git -C "$repo" rev-parse HEAD)
mirror=http://deb.debian.org/debian
load_start=$(cut -d' ' -f1-3 /proc/loadavg)

work=$(mktemp -d /var/tmp/minikit-first-run.XXXXXX)
root=$work/root
ns_pid=
cleanup() {
  local rc=$?
  set +e
  trap - INT TERM
  if [ -n "$ns_pid" ] && kill -0 "$ns_pid" 2>/dev/null; then
    # unshare ignores INT and TERM while it waits; its child, the PID
    # namespace's init, dies with it (--kill-child), and so does every process
    # of the namespace.
    kill -KILL "$ns_pid"
    wait "$ns_pid" 2>/dev/null
  fi
  if grep -q " $root" /proc/self/mounts; then
    echo "mounts under $root are still there in the root mount namespace; not removing it" >&2
    rc=1
  else
    rm -rf --one-file-system "$work"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

t0=$SECONDS
echo "== debootstrap --variant=minbase bookworm ($mirror)"
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$work/debootstrap.log" 2>&1 ||
  { tail -40 "$work/debootstrap.log" >&2; exit 1; }
echo "   $((SECONDS - t0))s"
cp -a /usr/local/go "$root/usr/local/go"
# The machine's own trust anchors (a TLS-inspecting egress proxy's CA, say):
# they reach the root's bundle only when ca-certificates is installed there.
if compgen -G '/usr/local/share/ca-certificates/*' >/dev/null; then
  cp -a /usr/local/share/ca-certificates/. "$root/usr/local/share/ca-certificates/"
fi
git clone -q --no-hardlinks --no-checkout "$(git -C "$repo" rev-parse --path-format=absolute --git-common-dir)" "$root/root/minikit"
git -C "$root/root/minikit" -c advice.detachedHead=false checkout -q "$rev"

installed() { chroot "$root" dpkg-query -W -f '${db:Status-Status} ${Package}\n' | sed -n 's/^installed //p' | sort; }
if [ -n "${PREINSTALL:-}" ]; then
  echo "== the machine has already: $PREINSTALL"
  chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    sh -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends $PREINSTALL >/dev/null"
fi
installed >"$work/before"

# Inside: private mounts (they end with the namespace), the machine's kernel
# modules where it has them on disk, then the tour; afterwards the network
# namespaces it left, if any, are deleted (their mount points are in this
# namespace's /run; the kernel frees them when the last reference goes).
inner=$(cat <<'EOF'
set -e
r=$1
# The root a mount point of its own, as / is on a machine: ip netns exec
# makes / a slave mount and fails on a plain directory.
mount --bind "$r" "$r"
mount -t proc proc "$r/proc"
# /sys with what the machine mounts under it (/sys/fs/cgroup).
mount --rbind /sys "$r/sys"
mount --rbind /dev "$r/dev"
mount -t tmpfs tmpfs "$r/run"
if [ -d "/lib/modules/$(uname -r)" ]; then
  mkdir -p "$r/usr/lib/modules/$(uname -r)"
  mount --bind -o ro "/lib/modules/$(uname -r)" "$r/usr/lib/modules/$(uname -r)"
fi
# pivot_root, not chroot, as test/provision boots its roots: the root is then
# this namespace's /, which pods' mount namespaces (nsenter --mount) start
# from; under a chroot they would see the machine's / instead.
mkdir -p "$r/.first-run-oldroot"
cd "$r"
pivot_root . .first-run-oldroot
cd /
umount -l /.first-run-oldroot
rmdir /.first-run-oldroot
set +e
/usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root GOCACHE=/root/.cache/go-build GOMODCACHE=/root/go/pkg/mod LANG=C.UTF-8 TERM=dumb /bin/bash -c 'cd /root/minikit && ./scripts/tour.sh' </dev/null 2>&1 |
  { s=$SECONDS; while IFS= read -r line; do printf '%4ds  %s\n' $((SECONDS - s)) "$line"; done; }
rc=${PIPESTATUS[0]}
if left=$(command -v ip >/dev/null && ip netns list 2>/dev/null) && [ -n "$left" ]; then
  echo "the tour left network namespaces: $(echo "$left" | cut -d' ' -f1 | tr '\n' ' ')"
  echo "$left" | cut -d' ' -f1 | while read -r n; do ip netns delete "$n"; done
  [ "$rc" != 0 ] || rc=1
fi
exit "$rc"
EOF
)
echo "== ./scripts/tour.sh in $root (a clone of $rev), empty Go caches"
: >"$work/tour.log" # before tail opens it
start=$SECONDS
unshare --mount --pid --fork --kill-child --propagation private -- /bin/bash -c "$inner" bash "$root" >"$work/tour.log" 2>&1 &
ns_pid=$!
tail -n +1 -f --pid="$ns_pid" "$work/tour.log" &
if wait "$ns_pid"; then tour_rc=0; else tour_rc=$?; fi
wait $! # tail, which prints the rest and ends with it
tour_s=$((SECONDS - start))
ns_pid=
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

installed >"$work/after"
new=$(comm -13 "$work/before" "$work/after")
count=$(grep -c . <<<"$new" || true)
bad=$(grep -E '^(linux-(image|headers|modules)|qemu|libvirt|chromium)' <<<"$new" || true)
passed=$(grep -c '  PASS  ' "$work/tour.log" || true)
ran=$(grep -cE '  (PASS|FAIL)  ' "$work/tour.log" || true)

echo
echo "== a newcomer's first run (clone of $rev, Debian 12 minbase${PREINSTALL:+ + $PREINSTALL})"
echo "packages installed: $count"
echo "$new" | fmt -w 100 | sed 's/^/  /'
echo "kernel, QEMU, libvirt or Chromium among them: ${bad:-none}"
echo "tour: ${tour_s}s (exit $tour_rc), examples passed: $passed of $ran"
echo "load average: at start $load_start, at end $load_end (on $(nproc) CPUs)"
ok=1
[ "$tour_rc" = 0 ] || ok=
[ "$count" -lt 60 ] || { echo "over budget: $count packages, want fewer than 60"; ok=; }
[ -z "$bad" ] || { echo "over budget: a kernel, QEMU, libvirt or Chromium was installed"; ok=; }
[ "$tour_s" -lt 300 ] || { echo "over budget: ${tour_s}s, want under 300"; ok=; }
[ -n "$ok" ]
