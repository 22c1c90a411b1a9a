#!/usr/bin/env bash
# RPC benchmark of the split deployment: 3 ironic-conductor processes (release build)
# on PostgreSQL and a RabbitMQ vhost of their own, driven by one caller process
# (crates/ironic/examples/rpc_bench.rs) as an ironic-api process would drive them.
# Prints round trips per second with p50/p99 for a bare round trip (ping) and for
# update_node (ring routing + node lock + row write), at concurrency 1 and 32.
# Needs: PostgreSQL on 127.0.0.1:5432 (trust, user postgres), RabbitMQ on 127.0.0.1:5672
# and rabbitmqctl (run as root). Cleans up after itself.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
CALLS="${CALLS:-20000}"
cargo build -q --release --bin ironic-conductor --bin ironic-dbsync --example rpc_bench
T="${CARGO_TARGET_DIR:-target}/release"
ID="bench$$"
split_env_create "$ID"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  split_env_drop "$ID"
}
trap cleanup EXIT
"$T/ironic-dbsync" --database "$DB" upgrade >/dev/null
export IRONIC_DATABASE__URL="$DB" IRONIC_AMQP__URL="$AMQP" RUST_LOG=warn IRONIC_CONDUCTOR__SHUTDOWN_SETTLE_TIME=0
for h in c1 c2 c3; do
  IRONIC_CONDUCTOR__HTTP_LISTEN=127.0.0.1:0 "$T/ironic-conductor" --host "$h" & PIDS+=($!)
done
for _ in $(seq 1 100); do
  n=$(rabbitmqctl -q list_queues -p "$ID" name consumers 2>/dev/null | grep -cE 'ironic\.conductor_manager\.[0-9a-f-]+\.c[123]\b' || true)
  [ "$n" = 3 ] && break; sleep 0.2
done
echo "== $CALLS calls each, one caller process, 3 conductors ($(nproc) cores shared by all)"
for m in ping update; do
  for c in 1 32; do
    calls=$CALLS; [ "$c" = 1 ] && calls=$((CALLS / 10))
    "$T/examples/rpc_bench" --amqp "$AMQP" --database "$DB" --hosts c1,c2,c3 \
      --method "$m" --concurrency "$c" --calls "$calls"
  done
done
