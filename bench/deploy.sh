#!/usr/bin/env bash
# N simultaneous `direct` deploys against simulated agents (ironic-load's `deploy`
# phase: each node's ramdisk is a fake ironic-python-agent, `ironic-fake-agent`, in the load generator's
# process that looks its node up, heartbeats and runs the conductor's commands), on the
# split deployment (1 ironic-api + 3 ironic-conductor, PostgreSQL, RabbitMQ) and then
# the all-in-one (SQLite), for each N in $NODES (default "100 1000"). Prints deploys per
# minute, each watched process's CPU per deploy, and the API calls per deploy.
#   bash bench/deploy.sh            NODES="100" bash bench/deploy.sh
# The servers run with automated cleaning off (the phase measures deploys), plain-HTTP
# agents allowed (the simulated agents have no TLS) and no per-address rate on the
# ramdisk routes (every agent is 127.0.0.1). Needs PostgreSQL on 127.0.0.1:5432 (trust,
# user postgres), RabbitMQ on 127.0.0.1:5672 and rabbitmqctl (root). Cleans up after
# itself.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
cargo build -q --release --bin ironic --bin ironic-api --bin ironic-conductor --bin ironic-dbsync --bin ironic-load
T="${CARGO_TARGET_DIR:-target}/release"
DIR=$(mktemp -d)
PIDS=()
ID=""
cleanup() {
  stop_all
  [ -n "$ID" ] && split_env_drop "$ID"
  rm -rf "$DIR"
}
trap cleanup EXIT

export RUST_LOG=warn IRONIC_CONDUCTOR__SHUTDOWN_SETTLE_TIME=0 \
  IRONIC_CONDUCTOR__AUTOMATED_CLEAN=false IRONIC_AGENT__REQUIRE_TLS=false \
  IRONIC_AGENT__POST_DEPLOY_GET_POWER_STATE_RETRIES=0 \
  IRONIC_API__RAMDISK_REQUESTS_PER_SECOND=0

for N in ${NODES:-100 1000}; do
  ID="dep$$n$N"
  split_env_create "$ID"
  "$T/ironic-dbsync" --database "$DB" upgrade >/dev/null
  P=$(port)
  start_split "$P"
  echo "== split deployment (1 API, 3 conductors, PostgreSQL, RabbitMQ): $N deploys"
  "$T/ironic-load" "http://127.0.0.1:$P" --phases deploy -n "$N" -c 16 \
    --pid "c1=${PIDS[0]}" --pid "c2=${PIDS[1]}" --pid "c3=${PIDS[2]}" --pid "api=${PIDS[3]}"
  stop_all
  split_env_drop "$ID"
  ID=""

  P=$(port)
  rm -f "$DIR/ironic.sqlite"
  "$T/ironic" --listen "127.0.0.1:$P" --database "sqlite://$DIR/ironic.sqlite" --host aio &
  PIDS=($!)
  wait_http "$P"
  echo "== all-in-one (SQLite): $N deploys"
  "$T/ironic-load" "http://127.0.0.1:$P" --phases deploy -n "$N" -c 16 --pid "ironic=${PIDS[0]}"
  stop_all
done
