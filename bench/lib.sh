# Sourced by the bench scripts that run the split deployment: starting it, a PostgreSQL database and
# a RabbitMQ vhost of their own for one run, and their removal. Needs PostgreSQL on
# 127.0.0.1:5432 (trust, user postgres), RabbitMQ on 127.0.0.1:5672, psql and
# rabbitmqctl (as root).

PG_ADMIN="postgres://postgres@127.0.0.1:5432/postgres"

# split_env_create ID: creates database ironic_ID and vhost ID (guest may use it); sets
# DB and AMQP to their URLs.
split_env_create() {
  psql -q "$PG_ADMIN" -c "CREATE DATABASE ironic_$1"
  rabbitmqctl -q add_vhost "$1" >/dev/null
  rabbitmqctl -q set_permissions -p "$1" guest '.*' '.*' '.*' >/dev/null
  DB="postgres://postgres@127.0.0.1:5432/ironic_$1"
  AMQP="amqp://guest:guest@127.0.0.1:5672/$1"
}

# split_env_drop ID: removes what split_env_create made (quietly, for traps).
split_env_drop() {
  rabbitmqctl -q delete_vhost "$1" >/dev/null 2>&1 || true
  psql -q "$PG_ADMIN" -c "DROP DATABASE IF EXISTS ironic_$1 WITH (FORCE)" >/dev/null 2>&1 || true
}

# The servers a bench script started (their pids in PIDS): stops them, waits (bounded)
# until they are gone, and forgets them.
stop_all() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do
    for _ in $(seq 1 300); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
  done
  PIDS=()
}

# A free TCP port on 127.0.0.1.
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# wait_http PORT: until the server on PORT answers (at most 10 s), else exit.
wait_http() { for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$1/" >/dev/null && return; sleep 0.1; done; exit 1; }

# wait_conductors PORT N: until the API on PORT sees N conductors alive (at most 10 s).
wait_conductors() {
  local alive
  for _ in $(seq 1 100); do
    alive=$(curl -sf -H 'X-OpenStack-Ironic-API-Version: 1.51' "http://127.0.0.1:$1/v1/conductors" \
      | python3 -c 'import json,sys; print(sum(c["alive"] for c in json.load(sys.stdin)["conductors"]))' || echo 0)
    [ "$alive" = "$2" ] && return; sleep 0.1
  done
}

# start_split PORT: the split deployment of release binaries in $T over $DB and $AMQP:
# conductors c1, c2, c3 and an API on PORT (their pids added to PIDS in that order);
# returns once the API sees the three conductors alive.
start_split() {
  local h
  for h in c1 c2 c3; do
    IRONIC_DATABASE__URL="$DB" IRONIC_AMQP__URL="$AMQP" IRONIC_CONDUCTOR__SHUTDOWN_SETTLE_TIME=0 \
      IRONIC_CONDUCTOR__HTTP_LISTEN=127.0.0.1:0 "$T/ironic-conductor" --host "$h" &
    PIDS+=($!)
  done
  IRONIC_DATABASE__URL="$DB" IRONIC_AMQP__URL="$AMQP" "$T/ironic-api" --listen "127.0.0.1:$1" &
  PIDS+=($!)
  wait_http "$1"
  wait_conductors "$1" 3
}

# autovacuum_like DB: what PostgreSQL's autovacuum does with its default settings, for a
# server that has it off (some test machines do), every NAPTIME seconds (default 30; the
# default autovacuum_naptime is 60): a table is vacuumed when its dead rows exceed
# 50 + 20% of its rows or its inserts since the last vacuum 1,000 + 20%, analysed when
# its changes since the last analysis exceed 50 + 10%; vacuum is throttled as
# autovacuum's is (cost delay 2 ms, limit 200), so it competes with the load as it would
# in production rather than as a full-speed VACUUM of every table. Runs until killed or
# the database is gone (at most 2 hours); killed (stop_all), it cancels the VACUUM it
# has running, which would otherwise go on, throttled, into the next measurement. With
# AV_LOG set, each statement is logged there as "START - SQL" when it starts and
# "START END SQL" when it ends (Unix seconds; one cancelled has no end), so that a
# benchmark can tell which measurements a vacuum overlapped.
autovacuum_like() {
  # Named once: a redirection of a command is expanded in the forked child, where
  # $BASHPID is the child's.
  local db=$1 rel vac ana app="autovacuum_like_$BASHPID" f="${DIR:-/tmp}/av.$BASHPID"
  local child=""
  # Children run in the background and are waited for: bash runs a trap only between
  # commands, and `wait` returns at once on a signal. On TERM the child goes too (a
  # sleep would hold the script's output open), and the server cancels the statement
  # (a psql killed mid-VACUUM leaves its VACUUM running).
  trap "kill \$child 2>/dev/null; psql -q '$db' -c \"SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name = '$app'\" >/dev/null 2>&1; exit 0" TERM
  for _ in $(seq 1 $(( 7200 / ${NAPTIME:-30} ))); do
    sleep "${NAPTIME:-30}" &
    child=$!
    wait $child
    psql -Atq -F ' ' "$db" -c "SELECT s.relname,
        s.n_dead_tup > 50 + 0.2 * greatest(c.reltuples, 0)
          OR s.n_ins_since_vacuum > 1000 + 0.2 * greatest(c.reltuples, 0),
        s.n_mod_since_analyze > 50 + 0.1 * greatest(c.reltuples, 0)
      FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid" 2>/dev/null >"$f" || return 0
    while read -r rel vac ana; do
      local sql=""
      if [ "$vac" = t ]; then
        sql="VACUUM (ANALYZE $([ "$ana" = t ] && echo true || echo false)) $rel"
      elif [ "$ana" = t ]; then
        sql="ANALYZE $rel"
      fi
      if [ -n "$sql" ]; then
        local t0
        t0=$(date +%s.%N)
        [ -z "${AV_LOG:-}" ] || echo "$t0 - $sql" >>"$AV_LOG"
        PGAPPNAME=$app PGOPTIONS="-c vacuum_cost_delay=2 -c vacuum_cost_limit=200" \
          psql -q "$db" -c "$sql" 2>/dev/null &
        child=$!
        wait $child || true
        [ -z "${AV_LOG:-}" ] || echo "$t0 $(date +%s.%N) $sql" >>"$AV_LOG"
      fi
    done <"$f"
  done
}
