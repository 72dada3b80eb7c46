#!/usr/bin/env bash
# A throwaway sentinel-managed Redis on loopback for the sentinel test pass: a primary on
# 127.0.0.1:7100, its replica on 7101, and three sentinels on 7110-7112 watching them as `pgw`
# (quorum 2), no persistence, each process in its own directory under a temporary folder.
#
#   .ci/redis-sentinel.sh start   # start them, wait until every sentinel names the primary and
#                                 # sees the replica in sync, and the quorum is reachable
#   .ci/redis-sentinel.sh stop    # shut every process down and remove the folder
#   .ci/redis-sentinel.sh url     # print the REDIS_URL that reaches the primary through them
set -euo pipefail
BASE_PORT="${PGW_SENTINEL_BASE_PORT:-7100}"
PRIMARY=$BASE_PORT
REPLICA=$((BASE_PORT + 1))
SENTINELS="$((BASE_PORT + 10)) $((BASE_PORT + 11)) $((BASE_PORT + 12))"
STATE="${TMPDIR:-/tmp}/pgw-redis-sentinel-${BASE_PORT}"

url() {
  local out="" first=1
  for p in $SENTINELS; do
    if [ $first = 1 ]; then out="redis-sentinel://127.0.0.1:$p?sentinelServiceName=pgw"; first=0; else out="${out}&node=127.0.0.1:$p"; fi
  done
  echo "$out"
}

stop() {
  for p in $SENTINELS $REPLICA $PRIMARY; do redis-cli -p "$p" shutdown nosave >/dev/null 2>&1 || true; done
  rm -rf "$STATE"
}

server_conf() {
  cat <<CONF
port $1
bind 127.0.0.1
dir $STATE/$1
daemonize yes
pidfile $STATE/$1/redis.pid
logfile $STATE/$1/redis.log
appendonly no
repl-diskless-sync-delay 0
save ""
CONF
}

start() {
  stop
  for p in $PRIMARY $REPLICA $SENTINELS; do mkdir -p "$STATE/$p"; done
  server_conf $PRIMARY >"$STATE/$PRIMARY/redis.conf"
  { server_conf $REPLICA; echo "replicaof 127.0.0.1 $PRIMARY"; } >"$STATE/$REPLICA/redis.conf"
  redis-server "$STATE/$PRIMARY/redis.conf"
  redis-server "$STATE/$REPLICA/redis.conf"
  for p in $SENTINELS; do
    # A sentinel rewrites its own file (what it learns of replicas and peers): one per sentinel.
    { server_conf "$p" | grep -v -e '^appendonly' -e '^save' -e '^repl-'
      echo "sentinel monitor pgw 127.0.0.1 $PRIMARY 2"
      echo "sentinel down-after-milliseconds pgw 1000"
      echo "sentinel failover-timeout pgw 5000"
    } >"$STATE/$p/sentinel.conf"
    redis-server "$STATE/$p/sentinel.conf" --sentinel
  done
  for _ in $(seq 1 200); do
    local ok=1
    redis-cli -p $REPLICA info replication 2>/dev/null | grep -q 'master_link_status:up' || ok=0
    for p in $SENTINELS; do
      redis-cli -p "$p" sentinel get-master-addr-by-name pgw 2>/dev/null | grep -q "^$PRIMARY\$" || ok=0
      redis-cli -p "$p" sentinel ckquorum pgw 2>/dev/null | grep -q '^OK' || ok=0
    done
    if [ $ok = 1 ]; then echo "redis sentinel up: $(url)"; return 0; fi
    sleep 0.1
  done
  echo "the sentinels did not agree on the primary; see $STATE" >&2
  return 1
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  url) url ;;
  *) echo "usage: $0 start|stop|url" >&2; exit 2 ;;
esac
