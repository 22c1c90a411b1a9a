#!/usr/bin/env bash
# Runs one benchmark client (a stdlib Python script taking the API URL first, then its
# own arguments) against the split deployment (1 ironic-api + 3 ironic-conductor,
# release build, PostgreSQL and a RabbitMQ vhost of their own) and then against the
# all-in-one default (SQLite), one after the other in one run:
#   bash bench/both.sh bench/provide.py -n 200
# Needs PostgreSQL on 127.0.0.1:5432 (trust, user postgres), RabbitMQ on 127.0.0.1:5672
# and rabbitmqctl (root). Cleans up after itself.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
CLIENT=("$@")
cargo build -q --release --bin ironic --bin ironic-api --bin ironic-conductor --bin ironic-dbsync
T="${CARGO_TARGET_DIR:-target}/release"
ID="prov$$"
DIR=$(mktemp -d)
PIDS=()
cleanup() {
  stop_all
  split_env_drop "$ID"
  rm -rf "$DIR"
}
trap cleanup EXIT

split_env_create "$ID"
"$T/ironic-dbsync" --database "$DB" upgrade >/dev/null
export RUST_LOG=warn
P=$(port)
start_split "$P"
echo "== split deployment (1 API, 3 conductors, PostgreSQL, RabbitMQ)"
python3 "${CLIENT[0]}" "http://127.0.0.1:$P" "${CLIENT[@]:1}"
stop_all

P=$(port)
"$T/ironic" --listen "127.0.0.1:$P" --database "sqlite://$DIR/ironic.sqlite" --host aio &
PIDS=($!)
wait_http "$P"
echo "== all-in-one (SQLite)"
python3 "${CLIENT[0]}" "http://127.0.0.1:$P" "${CLIENT[@]:1}"
