# Sourced by the bench scripts that run the split deployment: a PostgreSQL database and
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
