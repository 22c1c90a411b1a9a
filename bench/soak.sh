#!/usr/bin/env bash
# Soak and fault injection of the split deployment (docs/operations.md, "Soak and fault
# injection"): 1 ironic-api + 3 ironic-conductor (release build) on a PostgreSQL
# database and a RabbitMQ vhost of their own, each process reaching PostgreSQL through
# a TCP proxy of the harness. For DURATION seconds (default 600), 8 allocation clients
# and 4 life-cycle clients (deploy, undeploy + cleaning, manage, provide) run while the
# harness kills conductors with SIGKILL and restarts them, restarts the broker, cuts the
# database for everyone (DB_OUTAGE s, default 30) and cuts one conductor's database
# link. Then it checks and prints: requests sent, 201s whose allocation is gone (lost),
# nodes with two allocations, allocations left allocating, nodes left locked or in a
# transient state, the longest client-visible stall and the worst take-over time; exit
# status 1 if anything must-hold failed.
#
#   bash bench/soak.sh                    # 10 minutes
#   DURATION=120 FAULT_EVERY=15 bash bench/soak.sh
#
# Knobs: DURATION, FAULT_EVERY (mean seconds between faults, 25), DB_OUTAGE,
# ALLOC_CLIENTS, CYCLE_CLIENTS, ALLOC_NODES, NODES_PER_CYCLER, SEED, PROFILE
# (release|debug), BROKER_RESTART (app: rabbitmqctl stop_app/start_app, which restarts
# the whole broker node and needs rabbitmqctl as root; connections: only close this
# vhost's connections; off). Loopback only; bounded in time. Needs PostgreSQL on
# 127.0.0.1:5432 (trust, user postgres), RabbitMQ on 127.0.0.1:5672, rabbitmqctl, psql.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
PROFILE="${PROFILE:-release}"
if [ "$PROFILE" = release ]; then
  cargo build -q --release --bin ironic-api --bin ironic-conductor --bin ironic-dbsync
else
  cargo build -q --bin ironic-api --bin ironic-conductor --bin ironic-dbsync
fi
T="$(cd "${CARGO_TARGET_DIR:-target}/$PROFILE" && pwd)"
ID="soak$$"
split_env_create "$ID"
WORK="$(mktemp -d /tmp/ironic-soak.XXXXXX)"
cleanup() {
  rabbitmqctl -q start_app >/dev/null 2>&1 || true
  split_env_drop "$ID"
  echo "process logs: $WORK"
}
trap cleanup EXIT
"$T/ironic-dbsync" --database "$DB" upgrade >/dev/null
T="$T" DB_NAME="ironic_$ID" VHOST="$ID" WORK="$WORK" python3 bench/soak.py
