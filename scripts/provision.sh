#!/usr/bin/env bash
# Provisions a VM for minikit: prerequisites, the binary, and a systemd unit that
# runs `minikit server` or `minikit agent` with the same flags `minikit lab` uses.
# Usage: provision.sh server|agent NODE_IP SERVER_IP
set -euo pipefail
role=$1 node_ip=$2 server_ip=$3
src=${MINIKIT_SRC:-/vagrant}
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq iptables iproute2 dnsutils curl util-linux iputils-ping golang-go >/dev/null
apt-get install -y -qq kubernetes-client >/dev/null 2>&1 || true
if [ -x "$src/bin/minikit" ]; then
  install -m 0755 "$src/bin/minikit" /usr/local/bin/minikit
else
  (cd "$src" && go build -o /usr/local/bin/minikit ./minikit)
fi
# The server shares its token and CA with the agents through the synced folder.
share=$src/.vagrant-minikit
mkdir -p "$share"
name=$(hostname)
if [ "$role" = server ]; then
  exec_start="/usr/local/bin/minikit server --listen 0.0.0.0:6443 --advertise-address $node_ip --node-name $name --node-ip $node_ip --lb-pool 192.168.56.240-192.168.56.250"
else
  for i in $(seq 120); do [ -s "$share/token" ] && break; sleep 1; done
  exec_start="/usr/local/bin/minikit agent --server https://$server_ip:6443 --token-file $share/token --ca-file $share/ca.crt --node-name $name --node-ip $node_ip"
fi
cat >/etc/systemd/system/minikit.service <<UNIT
[Unit]
Description=minikit $role
After=network-online.target
Wants=network-online.target

[Service]
ExecStart=$exec_start
KillMode=process
Restart=on-failure

[Install]
WantedBy=multi-user.target
UNIT
systemctl daemon-reload
systemctl enable --now minikit
if [ "$role" = server ]; then
  for i in $(seq 60); do [ -s /var/lib/minikit/kubeconfig ] && break; sleep 1; done
  install -m 0600 /var/lib/minikit/token "$share/token"
  install -m 0644 /var/lib/minikit/tls/ca.crt "$share/ca.crt"
  mkdir -p /home/vagrant/.kube
  install -o vagrant -m 0600 /var/lib/minikit/kubeconfig /home/vagrant/.kube/config
fi
