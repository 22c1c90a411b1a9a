#!/usr/bin/env bash
# How long one round of the OneView periodic checks takes for N (default 1000) OneView
# nodes against the simulator: release build, all-in-one (SQLite), the simulator with N
# server hardware and 10 ms tasks. The nodes are enrolled, managed and provided
# (automated cleaning off); then the conductor's round of checks (one GET of the server
# hardware per available node) is timed from its log line. Cleans up after itself.
set -euo pipefail
cd "$(dirname "$0")/.."
N="${N:-1000}"
cargo build -q --release --bin ironic --bin oneview-simulator
T="${CARGO_TARGET_DIR:-target}/release"
DIR=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
cat >"$DIR/inv.toml" <<INV
[[server_hardware_types]]
id = "sht-1"
name = "BL460c Gen9 1"
[[enclosure_groups]]
id = "eg-1"
name = "EG 1"
[[server_profile_templates]]
id = "spt-1"
name = "Ironic"
server_hardware_type = "sht-1"
enclosure_group = "eg-1"
[[server_hardware]]
id = "sh"
name = "bay"
server_hardware_type = "sht-1"
enclosure_group = "eg-1"
count = $N
INV
SP=$(port); AP=$(port)
"$T/oneview-simulator" --insecure-http --listen "127.0.0.1:$SP" --inventory "$DIR/inv.toml" --task-duration-ms 10 >"$DIR/sim.log" 2>&1 & PIDS+=($!)
IRONIC_ONEVIEW__MANAGER_URL="http://127.0.0.1:$SP" IRONIC_ONEVIEW__USERNAME=administrator \
IRONIC_ONEVIEW__PASSWORD=password IRONIC_ONEVIEW__PERIODIC_CHECK_INTERVAL="${INTERVAL:-20}" \
IRONIC_CONDUCTOR__AUTOMATED_CLEAN=false RUST_LOG=info \
  "$T/ironic" --listen "127.0.0.1:$AP" --database "sqlite://$DIR/ironic.sqlite" --host bench >"$DIR/ironic.log" 2>&1 & PIDS+=($!)
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$AP/" >/dev/null && break; sleep 0.1; done
python3 - "$AP" "$N" <<'PY'
import http.client, json, sys, time
from concurrent.futures import ThreadPoolExecutor
port, n = int(sys.argv[1]), int(sys.argv[2])
hdr = {"X-OpenStack-Ironic-API-Version": "1.61", "Content-Type": "application/json"}
def call(m, p, b=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request(m, p, None if b is None else json.dumps(b), hdr)
    r = c.getresponse(); d = r.read(); c.close(); return r.status, d
caps = "server_hardware_type_uri:/rest/server-hardware-types/sht-1,server_profile_template_uri:/rest/server-profile-templates/spt-1"
def create(i):
    st, d = call("POST", "/v1/nodes", {"driver": "oneview", "name": "ov-%d" % i,
        "driver_info": {"server_hardware_uri": "/rest/server-hardware/sh-%d" % (i + 1), "dynamic_allocation": True},
        "properties": {"capabilities": caps}})
    assert st == 201, d
def verb(i, t):
    st, d = call("PUT", "/v1/nodes/ov-%d/states/provision" % i, {"target": t})
    assert st == 202, d
def count(state):
    got, marker = 0, None
    for _ in range(1000):
        path = "/v1/nodes?provision_state=%s&fields=uuid&limit=1000" % state
        st, d = call("GET", path + ("&marker=" + marker if marker else ""))
        page = json.loads(d)["nodes"]
        got += len(page)
        if len(page) < 1000: return got
        marker = page[-1]["uuid"]
    return got
def wait(state):
    for _ in range(6000):
        if count(state) >= n: return
        time.sleep(0.2)
    sys.exit("timeout waiting for " + state)
t0 = time.time()
with ThreadPoolExecutor(8) as ex:
    list(ex.map(create, range(n)))
    list(ex.map(lambda i: verb(i, "manage"), range(n))); wait("manageable")
    list(ex.map(lambda i: verb(i, "provide"), range(n))); wait("available")
print("N=%d: enrolled, managed and provided in %.1f s" % (n, time.time() - t0))
PY
# The next full round after every node is available.
for _ in $(seq 1 600); do
  line=$(grep "OneView checks" "$DIR/ironic.log" | grep "checked=$N" | tail -1 || true)
  [ -n "$line" ] && break; sleep 0.5
done
[ -n "$line" ] || { echo "no round of checks over $N nodes was logged"; tail -5 "$DIR/ironic.log"; exit 1; }
ms=$(sed -n 's/.*ms=\([0-9]*\).*/\1/p' <<<"$line")
echo "OneView periodic checks over $N available nodes: one round in ${ms} ms ($(python3 -c "print(round($N*1000/max($ms,1)))") nodes/s)"
