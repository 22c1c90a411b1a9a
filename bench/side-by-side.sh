#!/usr/bin/env bash
# Side-by-side read benchmark in one run: upstream OpenStack Ironic (from PyPI) and
# ours, both on PostgreSQL, then ours on SQLite (the all-in-one default), each measured
# by bench/read.sh (8 concurrent clients).
#
#   bash bench/side-by-side.sh [NODES=1000] [SECONDS=10]
#
# Upstream runs from a virtualenv (UPSTREAM_VENV, default /tmp/upstream/venv); create it
# with: python3 -m venv /tmp/upstream/venv && /tmp/upstream/venv/bin/pip install ironic==39.0.0 psycopg2-binary
# (the version measured is printed).
# Without it, only ours is measured. PostgreSQL: 127.0.0.1:5432, user postgres (PGURL).
# Upstream's settings are those of ../shared/bench/PEER.md (single process, no RPC bus,
# noauth, fake-hardware, automated_clean = false). Only 127.0.0.1 is contacted.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000}
SECS=${2:-10}
VENV=${UPSTREAM_VENV:-/tmp/upstream/venv}
PGURL=${PGURL:-postgres://postgres@127.0.0.1:5432}
export PGOPTIONS="--client-min-messages=warning"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
fresh_db() { psql "$PGURL/postgres" -qc "DROP DATABASE IF EXISTS $1 WITH (FORCE)" -c "CREATE DATABASE $1" >/dev/null; }
drop_db() { psql "$PGURL/postgres" -qc "DROP DATABASE IF EXISTS $1 WITH (FORCE)" >/dev/null 2>&1 || true; }
work=$(mktemp -d)
upid=""
cleanup() { [ -n "$upid" ] && kill "$upid" 2>/dev/null; drop_db sbs_upstream; drop_db sbs_ours; rm -rf "$work"; }
trap cleanup EXIT

if [ -x "$VENV/bin/ironic" ]; then
  echo "=== upstream $("$VENV/bin/pip" show ironic 2>/dev/null | awk '/^Version/{print $2}'), PostgreSQL"
  fresh_db sbs_upstream
  port=$(free_port)
  cat >"$work/ironic.conf" <<CONF
[DEFAULT]
rpc_transport = none
auth_strategy = noauth
host = peer-conductor
enabled_hardware_types = fake-hardware
enabled_boot_interfaces = fake
enabled_deploy_interfaces = fake
enabled_management_interfaces = fake
enabled_power_interfaces = fake
enabled_inspect_interfaces = fake
enabled_console_interfaces = fake
enabled_raid_interfaces = fake
enabled_bios_interfaces = fake
enabled_rescue_interfaces = fake
enabled_vendor_interfaces = fake
enabled_network_interfaces = noop
enabled_storage_interfaces = noop
enabled_firmware_interfaces = fake
[conductor]
automated_clean = false
[api]
port = $port
host_ip = 127.0.0.1
[database]
connection = postgresql+psycopg2://postgres@127.0.0.1:5432/sbs_upstream
[dhcp]
dhcp_provider = none
CONF
  "$VENV/bin/ironic-dbsync" --config-file "$work/ironic.conf" create_schema >"$work/dbsync.log" 2>&1
  "$VENV/bin/ironic" --config-file "$work/ironic.conf" >"$work/upstream.log" 2>&1 &
  upid=$!
  for _ in $(seq 1 240); do curl -sf "http://127.0.0.1:$port/" >/dev/null && break; sleep 0.5; done
  BENCH_URL="http://127.0.0.1:$port" BENCH_PID=$upid bash bench/read.sh "$N" "$SECS" | tail -5
  kill "$upid"; wait "$upid" 2>/dev/null || true; upid=""
else
  echo "=== upstream: no virtualenv at $VENV, skipped"
fi

echo "=== ours, PostgreSQL"
fresh_db sbs_ours
bash bench/read.sh "$N" "$SECS" "$PGURL/sbs_ours" | tail -5
echo "=== ours, SQLite (all-in-one default)"
bash bench/read.sh "$N" "$SECS" | tail -5
