#!/usr/bin/env bash
# openstacksdk's own functional tests for the Bare Metal service
# (openstack/tests/functional/baremetal, from the openstacksdk wheel on PyPI) against
# the all-in-one server. Not part of CI (it needs PyPI). Creates .venv/ on first use.
#   bash tests/compat/openstacksdk.sh            # every baremetal functional test
#   bash tests/compat/openstacksdk.sh -k runbook # a pytest selection
# Prints pytest's summary; skipped tests are listed with their reason (-rs), so a test
# skipped for a microversion we lack shows up.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -c 'import openstack, pytest, testtools, fixtures, oslotest' 2>/dev/null \
  || .venv/bin/pip install -q openstacksdk pytest testtools fixtures oslotest
cargo build -q --bin ironic
T="${CARGO_TARGET_DIR:-target}/debug"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$dir"; }
trap cleanup EXIT
"$T/ironic" --listen "127.0.0.1:$port" --database "sqlite://$dir/ironic.sqlite" --host sdk >"$dir/log" 2>&1 &
pid=$!
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/" >/dev/null && break; sleep 0.1; done
# Every cloud the tests name reaches us without Keystone (`noauth`).
{
  echo "clouds:"
  for c in devstack devstack-alt devstack-admin devstack-system-admin; do
    echo "  $c:"
    echo "    auth_type: none"
    # The session's own endpoint too: the tests read its microversions from there.
    echo "    auth:"
    echo "      endpoint: http://127.0.0.1:$port"
    echo "    baremetal_endpoint_override: http://127.0.0.1:$port"
    echo "    region_name: RegionOne"
    echo "    has_compute: false"
    echo "    has_image: false"
  done
} >"$dir/clouds.yaml"
export OS_CLIENT_CONFIG_FILE="$dir/clouds.yaml"
# openstacksdk's tox gives functional tests 600 s each (its unit-test default is 5 s):
# some wait on purpose, e.g. the client retries a 409 with back-off before giving up.
export OS_TEST_TIMEOUT="${OS_TEST_TIMEOUT:-600}"
tests=$(.venv/bin/python -c 'import os, openstack; print(os.path.join(os.path.dirname(openstack.__file__), "tests/functional/baremetal"))')
.venv/bin/python -m pytest -q -rs -p no:cacheprovider "$tests" "$@" || { tail -30 "$dir/log" >&2; exit 1; }
