#!/usr/bin/env bash
# Allocation throughput (bench/allocations.py) for each N in NS (default "1000 10000")
# available nodes with C (default 8) clients: split deployment (1 API, 3 conductors,
# PostgreSQL, RabbitMQ) then all-in-one (SQLite), fresh databases each time (see
# bench/both.sh for what it needs).
set -euo pipefail
cd "$(dirname "$0")/.."
for n in ${NS:-1000 10000}; do
  bash bench/both.sh bench/allocations.py -n "$n" -c "${C:-8}"
done
