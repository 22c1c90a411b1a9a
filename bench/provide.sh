#!/usr/bin/env bash
# enroll -> available with automated cleaning for N nodes (default 200), split
# deployment then all-in-one, in one run (see bench/both.sh for what it needs).
set -euo pipefail
cd "$(dirname "$0")/.."
exec bash bench/both.sh bench/provide.py -n "${N:-200}"
