#!/usr/bin/env bash
# A throwaway Redis Cluster on loopback for the cluster test pass: three primaries and three replicas
# on 127.0.0.1:7000-7005 (bus ports 17000-17005), no persistence, each node in its own directory
# under a temporary folder.
#
#   .ci/redis-cluster.sh start   # start the nodes, create the cluster, wait for cluster_state:ok
#                                # and every replica in sync
#   .ci/redis-cluster.sh stop    # shut every node down and remove the folder
#   .ci/redis-cluster.sh url     # print the REDIS_URL of the cluster
#
# A node's config file (`INFO server` -> config_file) restarts it as it was: the failover test
# kills a primary and starts it again from there, and it rejoins as a replica.
set -euo pipefail
BASE_PORT="${PGW_CLUSTER_BASE_PORT:-7000}"
NODES=6
STATE="${TMPDIR:-/tmp}/pgw-redis-cluster-${BASE_PORT}"
ports() { seq "$BASE_PORT" $((BASE_PORT + NODES - 1)); }

url() {
  local first=1 out=""
  for p in $(ports); do
    if [ $first = 1 ]; then out="redis-cluster://127.0.0.1:$p?"; first=0; else out="${out}node=127.0.0.1:$p&"; fi
  done
  echo "${out%&}"
}

stop() {
  for p in $(ports); do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
  rm -rf "$STATE"
}

start() {
  stop
  mkdir -p "$STATE"
  local addrs=()
  for p in $(ports); do
    mkdir -p "$STATE/$p"
    cat >"$STATE/$p/redis.conf" <<CONF
port $p
bind 127.0.0.1
dir $STATE/$p
daemonize yes
pidfile $STATE/$p/redis.pid
logfile $STATE/$p/redis.log
cluster-enabled yes
cluster-config-file nodes.conf
cluster-node-timeout 1000
appendonly no
repl-diskless-sync-delay 0
save ""
CONF
    redis-server "$STATE/$p/redis.conf"
    addrs+=("127.0.0.1:$p")
  done
  for p in $(ports); do
    for _ in $(seq 1 50); do redis-cli -p "$p" ping >/dev/null 2>&1 && break; sleep 0.1; done
  done
  redis-cli --cluster create "${addrs[@]}" --cluster-replicas 1 --cluster-yes >"$STATE/create.log"
  for _ in $(seq 1 100); do
    local ok=1
    for p in $(ports); do
      redis-cli -p "$p" cluster info 2>/dev/null | grep -q 'cluster_state:ok' || ok=0
      # A replica counts once it has synced: only then can it be promoted.
      if redis-cli -p "$p" info replication 2>/dev/null | grep -q 'role:slave'; then
        redis-cli -p "$p" info replication | grep -q 'master_link_status:up' || ok=0
      fi
    done
    if [ $ok = 1 ]; then echo "redis cluster up: $(url)"; return 0; fi
    sleep 0.1
  done
  echo "redis cluster did not reach cluster_state:ok; see $STATE" >&2
  return 1
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  url) url ;;
  *) echo "usage: $0 start|stop|url" >&2; exit 2 ;;
esac
