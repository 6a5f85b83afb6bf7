#!/usr/bin/env bash
# Provisions a Debian 12 VM (or any Debian 12 root) for minikit: prerequisites, a
# Go toolchain that satisfies go.mod, the binary, and a systemd unit that runs
# the host's role with the same flags `minikit lab` uses, so the examples'
# check.sh scripts run on the VMs unchanged (docs/vagrant.md).
#
# Usage: provision.sh ROLE NODE_IP SERVER_IP
#   ROLE      server | agent | client | external
#   NODE_IP   this host's address on the lab network (192.168.56.x)
#   SERVER_IP the first server's address (agents and joining servers use it)
# Environment (all optional):
#   MINIKIT_SRC     the source tree (default /vagrant, the synced folder)
#   MINIKIT_SSH_KEY an SSH private key (and KEY.pub) every host shares (the Vagrantfile
#                   makes it): root accepts it, the hosts fetch the first server's
#                   files with it, examples/lib.sh runs `on HOST` over it
#   MINIKIT_SHARE   where the first server leaves its token, CA and kubeconfig
#                   (default /etc/minikit/share)
#   MINIKIT_BINARY  a minikit built on the host (default $MINIKIT_SRC/bin/minikit
#                   when it exists: GOOS=linux GOARCH=amd64|arm64 go build -o bin/minikit ./cmd/minikit);
#                   without one (or set empty), the pinned Go toolchain is installed and builds it here
#   MINIKIT_HA=1    servers form an HA control plane with embedded etcd: the server
#                   at SERVER_IP runs --cluster-init, the others --join it with its
#                   DATA_DIR/server-token
#   MINIKIT_HOSTS   "NAME=IP ..." written to /etc/hosts, so every host is reached by name
#   MINIKIT_SERVER_IPS  every server's address, comma-separated (default: SERVER_IP); agents
#                   name them all in --server and fail over among them
#   MINIKIT_EXTERNAL_IP  the external host (default 192.168.56.200): DNS upstream
#   MINIKIT_LB_POOL the LoadBalancer pool (default 192.168.56.240-192.168.56.250)
#   GOPROXY         where the toolchain and modules come from (default https://proxy.golang.org)
# On a root without systemd running (a chroot, a container), the unit is written
# and its command started in the background (pid in /run/minikit.pid, log in
# /var/log/minikit.log): CI provisions a fresh Debian root that way (test/provision).
set -euo pipefail
usage() { echo "usage: provision.sh server|agent|client|external NODE_IP SERVER_IP" >&2; exit 2; }
[ $# = 3 ] || usage
role=$1 node_ip=$2 server_ip=$3
case $role in server | agent | client | external) ;; *) echo "provision.sh: unknown role \"$role\" (want server, agent, client or external)" >&2; usage ;; esac
src=${MINIKIT_SRC:-/vagrant}
# What the first server shares with the other hosts (its token, CA and
# kubeconfig); they fetch it over SSH.
share=${MINIKIT_SHARE:-/etc/minikit/share}
export DEBIAN_FRONTEND=noninteractive
export PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# The Go toolchain: the official release, as the Go module proxy serves it
# (golang.org/toolchain, the module `go` itself switches to), checked against the
# go.sum hash pinned here. To move to a newer Go: set go_version, then take each
# architecture's "Sum" from `go mod download -json golang.org/toolchain@v0.0.1-goVERSION.linux-ARCH`.
go_version=1.26.8
declare -A go_h1=(
  [amd64]=h1:ZOmGe1OnfREDMIdb1Qi4G9JSuDPBLGExZMQ4nis1RXM=
  [arm64]=h1:sYL/O6MqS68ML0kjsQ36WoYIpJqkw60TxizWUYUKQMc=
)

log() { printf "provision: %s (%ds)\n" "$*" "$SECONDS" >&2; }
die() { printf 'provision: %s\n' "$*" >&2; exit 1; }

# fetch FILE DEST: one of the first server's shared files, over SSH (it may
# still be provisioning).
fetch() {
  local i
  for i in $(seq 300); do
    if scp -q -o ConnectTimeout=5 "root@$server_ip:$share/$1" "$2.part" 2>/dev/null; then
      mv "$2.part" "$2"
      return 0
    fi
    sleep 2
  done
  die "waited 10 minutes for $share/$1 on $server_ip (provision the first server first: vagrant up node1)"
}

install_packages() {
  local need=() p
  for p in iptables iproute2 nftables dnsutils curl ca-certificates util-linux iputils-ping unzip openssh-client openssh-server jq kubernetes-client; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
  done
  [ ${#need[@]} = 0 ] && return
  log "installing ${need[*]}"
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
}

# go_h1 DIR: the go.sum hash (dirhash h1) of the module extracted in DIR: the
# SHA-256 of the sorted "SHA256  PATH" lines of its files, base64.
go_h1() {
  local h
  h=$(cd "$1" && find . -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-64)
  printf 'h1:%s' "$(printf "$(sed 's/../\\x&/g' <<<"$h")" | base64)"
}

# goproxy: the first proxy of GOPROXY (a list, as go reads it) to fetch from.
goproxy() {
  local p
  IFS=',|' read -ra ps <<<"${GOPROXY:-https://proxy.golang.org}"
  for p in "${ps[@]}"; do
    case $p in https://* | http://* | file://*) echo "${p%/}"; return ;; esac
  done
  die "GOPROXY=$GOPROXY names no proxy to fetch the Go toolchain from (want https://, http:// or file://)"
}

install_go() {
  local arch want ver url cache tmp got
  arch=$(dpkg --print-architecture)
  want=${go_h1[$arch]:-}
  [ -n "$want" ] || die "no pinned Go toolchain for architecture $arch (pinned: ${!go_h1[*]}); build minikit on the host instead (MINIKIT_BINARY, docs/vagrant.md)"
  if [ "$(/usr/local/go/bin/go env GOVERSION 2>/dev/null)" = "go$go_version" ]; then return; fi
  ver=v0.0.1-go$go_version.linux-$arch
  url=$(goproxy)/golang.org/toolchain/@v/$ver.zip
  cache=/var/cache/minikit-provision
  mkdir -p "$cache"
  if [ ! -s "$cache/$ver.zip" ]; then
    log "downloading Go $go_version ($arch) from $url"
    curl -fsSL --retry 3 -o "$cache/$ver.zip.part" "$url" || die "downloading $url failed"
    mv "$cache/$ver.zip.part" "$cache/$ver.zip"
  fi
  tmp=$(mktemp -d)
  unzip -q "$cache/$ver.zip" -d "$tmp"
  got=$(go_h1 "$tmp")
  if [ "$got" != "$want" ]; then
    rm -rf "$tmp" "${cache:?}/$ver.zip"
    die "Go toolchain $url: checksum $got, want $want (pinned in provision.sh): not installed"
  fi
  # Module zips keep no file modes; go itself marks these executable when it switches toolchains.
  chmod 0755 "$tmp/golang.org/toolchain@$ver/bin/"* "$tmp/golang.org/toolchain@$ver/pkg/tool/linux_$arch/"*
  rm -rf /usr/local/go
  mv "$tmp/golang.org/toolchain@$ver" /usr/local/go
  rm -rf "$tmp"
  log "installed $(/usr/local/go/bin/go version) (checksum $want)"
}

# check_go_mod: the installed Go satisfies the go (and toolchain) line of go.mod.
check_go_mod() {
  local need
  need=$(sed -n 's/^toolchain go//p; s/^go //p' "$src/go.mod" | sort -V | tail -1)
  [ -n "$need" ] || die "$src/go.mod has no go line"
  [ "$(printf '%s\n%s\n' "$need" "$go_version" | sort -V | tail -1)" = "$go_version" ] ||
    die "$src/go.mod needs Go $need; provision.sh pins Go $go_version: update go_version and go_h1 in scripts/provision.sh"
}

install_minikit() {
  local bin=${MINIKIT_BINARY-$src/bin/minikit}
  if [ -n "$bin" ] && [ -e "$bin" ]; then
    "$bin" version >/dev/null 2>&1 || die "$bin does not run here (built for another OS or architecture? GOOS=linux GOARCH=$(dpkg --print-architecture) go build -o bin/minikit ./cmd/minikit)"
    install -m 0755 "$bin" /usr/local/bin/minikit
    log "installed $bin"
    return
  fi
  check_go_mod
  install_go
  log "building minikit from $src"
  # GOTOOLCHAIN=local: never switch to another toolchain (check_go_mod proved this one fits).
  (cd "$src" && GOTOOLCHAIN=local GOFLAGS=-buildvcs=false go build -o /usr/local/bin/minikit.new ./cmd/minikit)
  mv /usr/local/bin/minikit.new /usr/local/bin/minikit
}

# hosts: every lab host by name, as `minikit lab exec NAME` names them.
write_hosts() {
  local kv name ip
  [ -n "${MINIKIT_HOSTS:-}" ] || return 0
  sed -i '/# minikit$/d' /etc/hosts
  for kv in $MINIKIT_HOSTS; do
    name=${kv%%=*} ip=${kv#*=}
    printf '%s\t%s # minikit\n' "$ip" "$name" >>/etc/hosts
  done
}

# ssh_trust: root on every host accepts the hosts' shared key, so the hosts
# reach each other as root by name (examples/lib.sh's `on HOST CMD`, fetch).
ssh_trust() {
  mkdir -p /root/.ssh
  chmod 0700 /root/.ssh
  if [ -n "${MINIKIT_SSH_KEY:-}" ]; then
    install -m 0600 "$MINIKIT_SSH_KEY" /root/.ssh/id_rsa
    install -m 0644 "$MINIKIT_SSH_KEY.pub" /root/.ssh/id_rsa.pub
  elif [ ! -s /root/.ssh/id_rsa ]; then
    # A host provisioned on its own: a key of its own (no other host has it).
    ssh-keygen -q -t rsa -b 3072 -N '' -C minikit-lab -f /root/.ssh/id_rsa
  fi
  touch /root/.ssh/authorized_keys
  grep -qF "$(cut -d' ' -f2 /root/.ssh/id_rsa.pub)" /root/.ssh/authorized_keys || cat /root/.ssh/id_rsa.pub >>/root/.ssh/authorized_keys
  chmod 0600 /root/.ssh/authorized_keys
  printf 'Host node* client external %s\n  User root\n  IdentityFile /root/.ssh/id_rsa\n  StrictHostKeyChecking accept-new\n  BatchMode yes\n  LogLevel ERROR\n' "$server_ip" >/root/.ssh/config
}

external_ip=${MINIKIT_EXTERNAL_IP:-192.168.56.200}
lb_pool=${MINIKIT_LB_POOL:-192.168.56.240-192.168.56.250}
name=$(hostname)

install_packages
install_minikit
write_hosts
ssh_trust
mkdir -p /etc/minikit
case $role in
server)
  argv=(/usr/local/bin/minikit server --listen 0.0.0.0:6443 --advertise-address "$node_ip"
    --node-name "$name" --node-ip "$node_ip" --lb-pool "$lb_pool" --dns-upstream "$external_ip")
  if [ "${MINIKIT_HA:-}" = 1 ]; then
    if [ "$node_ip" = "$server_ip" ]; then
      argv+=(--cluster-init)
    else
      # The first server's DATA_DIR/server-token: what a joining server shows
      # (an agent's token is DATA_DIR/token).
      fetch server-token /etc/minikit/server-token
      argv+=(--join "https://$server_ip:6443" --token-file /etc/minikit/server-token)
    fi
  fi
  ;;
agent)
  fetch token /etc/minikit/token
  fetch ca.crt /etc/minikit/ca.crt
  servers=
  IFS=, read -ra ips <<<"${MINIKIT_SERVER_IPS:-$server_ip}"
  for ip in "${ips[@]}"; do servers+=${servers:+,}https://$ip:6443; done
  argv=(/usr/local/bin/minikit agent --server "$servers" --token-file /etc/minikit/token
    --ca-file /etc/minikit/ca.crt --node-name "$name" --node-ip "$node_ip" --dns-upstream "$external_ip")
  ;;
external)
  # The lab's external host: authoritative DNS for example.com and an HTTP service.
  argv=(/usr/local/bin/minikit __lab-external --address "$node_ip")
  ;;
client)
  argv=()
  ;;
esac

# What examples/lib.sh reads on this host: reach the other hosts over SSH, and
# the cluster's kubeconfig.
printf 'MINIKIT_HOSTS_VIA=ssh\nKUBECONFIG=/etc/minikit/kubeconfig\n' >/etc/minikit/examples.env

if [ ${#argv[@]} -gt 0 ]; then
  cat >/etc/systemd/system/minikit.service <<UNIT
[Unit]
Description=minikit $role
After=network-online.target
Wants=network-online.target

[Service]
ExecStart=${argv[*]}
KillMode=process
Restart=on-failure

[Install]
WantedBy=multi-user.target
UNIT
  # restart, not start: `vagrant provision` again runs the new binary and flags.
  if [ -d /run/systemd/system ]; then
    systemctl daemon-reload
    systemctl enable minikit
    systemctl restart minikit
  else
    # (Until it is gone or a zombie: a container's init may never reap it.)
    if [ -s /run/minikit.pid ] && kill "$(cat /run/minikit.pid)" 2>/dev/null; then
      for i in $(seq 30); do
        state=$(sed 's/.*) //' "/proc/$(cat /run/minikit.pid)/stat" 2>/dev/null | cut -c1)
        [ -n "$state" ] && [ "$state" != Z ] || break
        sleep 1
      done
    fi
    log "systemd is not running here: starting ${argv[*]} in the background (log /var/log/minikit.log)"
    setsid "${argv[@]}" >>/var/log/minikit.log 2>&1 </dev/null &
    echo $! >/run/minikit.pid
  fi
fi

if [ "$role" = server ]; then
  for i in $(seq 120); do [ -s /var/lib/minikit/kubeconfig ] && break; sleep 1; done
  [ -s /var/lib/minikit/kubeconfig ] || die "minikit server wrote no /var/lib/minikit/kubeconfig in 2 minutes: $(tail -20 /var/log/minikit.log 2>/dev/null || journalctl -u minikit -n 20 --no-pager)"
  install -m 0600 /var/lib/minikit/kubeconfig /etc/minikit/kubeconfig
  if [ "$node_ip" = "$server_ip" ]; then
    mkdir -p "$share"
    chmod 0700 "$share"
    install -m 0600 /var/lib/minikit/token "$share/token"
    install -m 0644 /var/lib/minikit/tls/ca.crt "$share/ca.crt"
    if [ "${MINIKIT_HA:-}" = 1 ]; then
      install -m 0600 /var/lib/minikit/server-token "$share/server-token"
    fi
    # Every host's kubeconfig: the server's, naming the server by its lab address.
    sed "s#server: https://[^ ]*#server: https://$server_ip:6443#" /var/lib/minikit/kubeconfig >"$share/kubeconfig"
    chmod 0600 "$share/kubeconfig"
  fi
else
  fetch kubeconfig /etc/minikit/kubeconfig
  chmod 0600 /etc/minikit/kubeconfig
fi
if id vagrant >/dev/null 2>&1; then
  install -d -o vagrant -g vagrant /home/vagrant/.kube
  install -o vagrant -g vagrant -m 0600 /etc/minikit/kubeconfig /home/vagrant/.kube/config
fi
log "$role $name ($node_ip) provisioned"
