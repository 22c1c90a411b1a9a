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
