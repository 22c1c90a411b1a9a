#!/usr/bin/env bash
# Scale: for each N in SIZES (default "1000 10000 100000") and each deployment in MODES
# (default "split aio"), a fresh database; creates N nodes through the API, makes them
# available (a hundred then go into maintenance, another hundred are retired), and
# drives with ironic-load (crates/ironic-load: C connections, default 32): creation,
# a burst of allocations, then (on READ_C connections, default 8, for 1 s each) point
# reads, every node list filter and sort key, allocation lists; a closed loop of
# allocations, deallocations; then prints the figures of every
# run side by side (ops/s and p99 per N) with the resident memory of the API and of
# each conductor, and the CPU of every process. A read that a power-state sync round (S)
# or, when this script does autovacuum's work (below), a vacuum or analysis (V)
# overlapped is marked so in the table: such a read measures the list and that work
# together (?: a process's /metrics did not answer). The fill is vacuumed and analysed
# at full speed before anything else is measured (run_load). The other pass over every node, the
# node metrics' every 15 s, reads light rows and is not marked (ironic-load's JSON has
# every task that ran during each read).
#
#   bash bench/scale.sh                               # everything (~60 min here)
#   SIZES="1000 10000" MODES=split bash bench/scale.sh
#
# split: 1 ironic-api + 3 ironic-conductor, PostgreSQL and a RabbitMQ vhost of its own
# (needs PostgreSQL on 127.0.0.1:5432, trust, user postgres; RabbitMQ on 127.0.0.1:5672
# and rabbitmqctl, as root). aio: the all-in-one `ironic` on PostgreSQL (AIO_DB=sqlite
# for the default SQLite file). Loopback only; every wait is bounded; the databases and
# vhosts are dropped at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
SIZES=${SIZES:-1000 10000 100000}
MODES=${MODES:-split aio}
C=${C:-32}
READ_C=${READ_C:-8}
READ_SECONDS=${READ_SECONDS:-1}
cargo build -q --release --bin ironic --bin ironic-api --bin ironic-conductor \
  --bin ironic-dbsync --bin ironic-load
T="${CARGO_TARGET_DIR:-target}/release"
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
DIR=$(mktemp -d)
PIDS=()
IDS=()
cleanup() {
  stop_all
  for id in "${IDS[@]}"; do split_env_drop "$id"; done
  rm -rf "$DIR"
}
trap cleanup EXIT
postmaster=$(head -1 "$(psql -Atq "$PG_ADMIN" -c 'SHOW data_directory')/postmaster.pid" 2>/dev/null || pgrep -o postgres || echo 0)

# What the read phase drives: a node, pages of 100 (list, detail), every filter of
# GET /v1/nodes (the issue's slow ones among them) and the combinations clients send,
# every sort key, the allocation list. Microversion 1.65 (ironic-load's default: the
# lessee filter needs it). ironic-load's fleet has groups of a hundred nodes at any size
# (owners, lessees, racks, maintenance, retired), so each filter below that matches
# anything (all but ?fault= and the two "(none)") answers a full page at 1,000 nodes as
# at 100,000; the table's "items" column shows each answer's size.
reads() {
  local r=(
    "node=/v1/nodes/{uuid}"
    "list=/v1/nodes?limit=100"
    "detail=/v1/nodes/detail?limit=100"
    "?provision_state=available=/v1/nodes?limit=100&provision_state=available"
    "?provision_state=manageable=/v1/nodes?limit=100&provision_state=manageable"
    "?driver=fake-hardware=/v1/nodes?limit=100&driver=fake-hardware"
    "?maintenance=true=/v1/nodes?limit=100&maintenance=true"
    "?retired=true=/v1/nodes?limit=100&retired=true"
    "?fault=power failure=/v1/nodes?limit=100&fault=power%20failure"
    "?associated=true=/v1/nodes?limit=100&associated=true"
    "?associated=false=/v1/nodes?limit=100&associated=false"
    "?resource_class=load=/v1/nodes?limit=100&resource_class=load"
    "?conductor_group==/v1/nodes?limit=100&conductor_group="
    "?owner=project-3=/v1/nodes?limit=100&owner=project-3"
    "?lessee=project-3=/v1/nodes?limit=100&lessee=project-3"
    "?project=project-3=/v1/nodes?limit=100&project=project-3"
    "?description_contains=rack 0 =/v1/nodes?limit=100&description_contains=rack%200%20"
    "?chassis_uuid=(none)=/v1/nodes?limit=100&chassis_uuid=00000000-0000-0000-0000-000000000000"
    "?instance_uuid=(none)=/v1/nodes?limit=100&instance_uuid=00000000-0000-0000-0000-000000000000"
    "available&rc&sort name=/v1/nodes?limit=100&provision_state=available&resource_class=load&sort_key=name"
    "driver&sort updated_at=/v1/nodes?limit=100&driver=fake-hardware&sort_key=updated_at"
    "nova: associated, fields=/v1/nodes?associated=true&fields=uuid,power_state,provision_state,instance_uuid,maintenance&limit=100"
  )
  local k
  for k in id uuid name driver instance_uuid chassis_uuid provision_state \
    target_provision_state provision_updated_at power_state target_power_state \
    console_enabled maintenance maintenance_reason fault last_error reservation \
    inspection_started_at inspection_finished_at resource_class conductor_group \
    automated_clean protected protected_reason owner lessee description retired \
    retired_reason bios_interface boot_interface console_interface deploy_interface \
    inspect_interface management_interface network_interface power_interface \
    raid_interface rescue_interface storage_interface vendor_interface created_at \
    updated_at; do
    r+=("sort_key=$k=/v1/nodes?limit=100&sort_key=$k&sort_dir=desc")
  done
  r+=(
    "allocations=/v1/allocations?limit=100"
    "allocations ?state=active=/v1/allocations?limit=100&state=active"
    "allocations sort updated_at=/v1/allocations?limit=100&sort_key=updated_at"
  )
  local x
  for x in "${r[@]}"; do printf -- '--read\0%s\0' "$x"; done
}
mapfile -d '' READS < <(reads)

run_load() { # mode n port pid-and-metrics-args...
  local mode=$1 n=$2 p=$3; shift 3
  : >"$OUT/$mode-$n-vacuum.log"
  if [ "$autovacuum" != on ]; then
    AV_LOG="$OUT/$mode-$n-vacuum.log" autovacuum_like "$DB" &
    PIDS+=($!)
  fi
  echo "== $mode, $n nodes"
  "$T/ironic-load" "http://127.0.0.1:$p" -n "$n" -c "$C" --phases create,provide \
    "$@" --json "$OUT/$mode-$n-a.json"
  # What autovacuum would start within the minute after the fill (every node inserted,
  # then changed by the provide phase), at full speed so that it is over before anything
  # else is measured: the fleet as it is once the service has settled. Its throttled
  # form, caught up by the reads, is what the seventh and eighth runs measured at
  # 100,000 nodes besides the lists (docs/scale.md).
  psql -q "$DB" -c "VACUUM (ANALYZE)"
  "$T/ironic-load" "http://127.0.0.1:$p" -n "$n" -c "$C" --read-seconds "$READ_SECONDS" \
    --read-connections "$READ_C" --phases alloc-burst,read,alloc-closed,dealloc \
    --allocations "$(( n < 8000 ? n / 4 : 2000 ))" --closed-seconds 5 \
    "${READS[@]}" "$@" --json "$OUT/$mode-$n-b.json"
}

# PostgreSQL's autovacuum keeps statistics current and removes dead row versions; a
# server with it off (as some test machines are) plans every list blind and grows its
# indexes without end. Then this script does autovacuum's work itself, by its default
# thresholds and throttle (autovacuum_like, bench/lib.sh).
autovacuum=$(psql -Atq "$PG_ADMIN" -c 'SHOW autovacuum')
[ "$autovacuum" = on ] || echo "autovacuum is off on this server: this script does its work (autovacuum_like)"

for n in $SIZES; do
  for mode in $MODES; do
    id="scale$$_${mode}_$n"
    IDS+=("$id")
    split_env_create "$id"
    "$T/ironic-dbsync" --database "$DB" upgrade >/dev/null
    # The API's port and the conductors' metrics ports, bound at once: four different
    # ports, free a moment ago.
    read -r P M1 M2 M3 < <(python3 -c 'import socket
ss = [socket.socket() for _ in range(4)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in ss))')
    export RUST_LOG=warn IRONIC_CONDUCTOR__AUTOMATED_CLEAN=false
    if [ "$mode" = split ]; then
      metrics=()
      for h in c1 c2 c3; do
        mp=$M1; [ $h = c2 ] && mp=$M2; [ $h = c3 ] && mp=$M3
        IRONIC_DATABASE__URL="$DB" IRONIC_AMQP__URL="$AMQP" IRONIC_CONDUCTOR__SHUTDOWN_SETTLE_TIME=0 \
          IRONIC_CONDUCTOR__HTTP_LISTEN="127.0.0.1:$mp" "$T/ironic-conductor" --host "$h" \
          >"$DIR/$id-$h.log" 2>&1 &
        PIDS+=($!)
        metrics+=(--metrics "http://127.0.0.1:$mp")
      done
      IRONIC_DATABASE__URL="$DB" IRONIC_AMQP__URL="$AMQP" "$T/ironic-api" --listen "127.0.0.1:$P" \
        >"$DIR/$id-api.log" 2>&1 &
      PIDS+=($!)
      wait_http "$P"
      wait_conductors "$P" 3
      run_load split "$n" "$P" --pid "api=${PIDS[3]}" --pid "c1=${PIDS[0]}" --pid "c2=${PIDS[1]}" \
        --pid "c3=${PIDS[2]}" --pid "postgres=$postmaster" "${metrics[@]}"
    else
      aio_db=$DB
      [ "${AIO_DB:-postgres}" = sqlite ] && aio_db="sqlite://$DIR/$id.sqlite"
      "$T/ironic" --listen "127.0.0.1:$P" --database "$aio_db" --host aio >"$DIR/$id-aio.log" 2>&1 &
      PIDS+=($!)
      wait_http "$P"
      run_load aio "$n" "$P" --pid "ironic=${PIDS[0]}" --pid "postgres=$postmaster" \
        --metrics "http://127.0.0.1:$P"
    fi
    stop_all
    split_env_drop "$id"
  done
done

echo
echo "== side by side (ops/s, p99 ms; $C connections, reads on $READ_C; results in $OUT)"
python3 - "$OUT" $MODES -- $SIZES <<'PY'
import json, os, sys
out = sys.argv[1]
i = sys.argv.index("--")
modes, sizes = sys.argv[2:i], sys.argv[i + 1:]
runs = {}
for m in modes:
    for n in sizes:
        rows = []
        for part in ("a", "b"):
            f = os.path.join(out, f"{m}-{n}-{part}.json")
            if os.path.exists(f):
                rows += json.load(open(f))["rows"]
        if rows:
            runs[(m, n)] = rows
# Autovacuum's work (autovacuum_like's log): (start, end) per statement, a cancelled one
# lasting to the end of its run.
work = {}
for m in modes:
    for n in sizes:
        f = os.path.join(out, f"{m}-{n}-vacuum.log")
        spans = {}
        if os.path.exists(f):
            for line in open(f):
                if len(line.split()) < 3:
                    continue  # a line cut short by a kill
                t0, t1, *_ = line.split()
                if t1 == "-":
                    spans.setdefault(t0, float("inf"))
                else:
                    spans[t0] = float(t1)
        work[(m, n)] = [(float(a), b) for a, b in spans.items()]

def marks(k, r):
    """S: a power-state sync round ran during the read; V: a vacuum or analysis."""
    ran = r.get("periodic", [])
    s = "?" if ran is None else "S" if "power-state sync" in ran else ""
    a, b = r.get("started_unix"), r.get("ended_unix")
    if a is not None and any(t0 < b and a < t1 for t0, t1 in work.get(k, [])):
        s += "V"
    return f" {s}" if s else ""
cols = [k for k in ((m, n) for m in modes for n in sizes) if k in runs]
labels = []
for k in cols:
    for r in runs[k]:
        key = (r["phase"], r["label"])
        if r["label"] != "rss" and key not in labels:
            labels.append(key)
head = "| phase | request | items | " + " | ".join(f"{m} {int(n):,}" for m, n in cols) + " |"
print(head)
print("|" + " --- |" * (3 + len(cols)))
for ph, lb in labels:
    # The answer's size at each size in SIZES (a list's page: at most 100), once.
    items = []
    for n in sizes:
        got = {r.get("items") for k in cols if k[1] == n for r in runs[k]
               if (r["phase"], r["label"]) == (ph, lb)} - {None}
        items.append("/".join(str(i) for i in sorted(got)) or "-")
    cells = [" · ".join(items) if any(i != "-" for i in items) else ""]
    for k in cols:
        r = next((r for r in runs[k] if (r["phase"], r["label"]) == (ph, lb)), None)
        if r is None:
            cells.append("")
        elif ph == "read" or lb.startswith("POST /v1/nodes") or ph in ("dealloc", "alloc-closed"):
            e = f", {r['errors']} err" if r["errors"] else ""
            cells.append(f"{r['ops_per_s']:,.0f}/s p99 {r['p99_ms']:.1f}{e}{marks(k, r)}")
        else:
            e = f", {r['errors']} err" if r["errors"] else ""
            cells.append(f"{r['ops_per_s']:,.0f}/s ({r['ops']:,} in {r['seconds']:.1f} s){e}")
    print(f"| {ph} | {lb} | " + " | ".join(cells) + " |")
cells = []
for k in cols:
    rss = [r for r in runs[k] if r["label"] == "rss"][-1]["rss_mib"]
    cells.append(", ".join(f"{l} {v:.0f}" for l, v in rss.items() if l != "postgres"))
print("| memory | resident MiB at the end | | " + " | ".join(cells) + " |")
print()
print("S: a power-state sync round ran during the read; V: a vacuum or analysis by this script"
      " did (when the server's autovacuum is off); ?: a process's /metrics did not answer.")
PY
