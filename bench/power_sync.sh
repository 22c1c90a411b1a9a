#!/usr/bin/env bash
# The power-state sync over N Redfish nodes (default 1000) served by E sushy-tools
# emulators (default 1; the fake systems driver, on loopback), all-in-one on SQLite:
# enrolls and manages the nodes through the API, then prints how long sync rounds take
# (the conductor's `ironic_power_sync_round_seconds`) with `[conductor]
# sync_power_state_workers` W (default 8, the default). Bounded in time; cleans up.
#
#   bash bench/power_sync.sh                  # 1,000 nodes, one emulator
#   N=10000 E=4 bash bench/power_sync.sh      # 10,000 nodes over four emulators
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-1000}
E=${E:-1}
W=${W:-8}
ROUNDS=${ROUNDS:-3}

cargo build -q --release --bin ironic
T="${CARGO_TARGET_DIR:-target}/release"
IRONIC_TEST_DATA="${IRONIC_TEST_DATA:-$HOME/.cache/ironic-test-data}"
venv="$IRONIC_TEST_DATA/venv"
if ! "$venv/bin/python" -c 'import sushy_tools' 2>/dev/null; then
  mkdir -p "$IRONIC_TEST_DATA"
  [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install -q sushy-tools
fi

DIR=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$DIR"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# E emulators, each with its share of the N systems (uuids by index).
EPORTS=()
per=$(( (N + E - 1) / E ))
for e in $(seq 0 $((E - 1))); do
  start=$((e * per)); end=$(( start + per < N ? start + per : N ))
  mkdir -p "$DIR/emu$e/state"
  cat >"$DIR/emu$e/emulator.conf" <<CONF
SUSHY_EMULATOR_FAKE_DRIVER = True
SUSHY_EMULATOR_STATE_DIR = '$DIR/emu$e/state'
SUSHY_EMULATOR_FAKE_SYSTEMS = [
    {'uuid': '00000000-0000-4000-8000-%012d' % i, 'name': 'node-%d' % i,
     'power_state': 'Off', 'nics': [{'mac': '52:54:%02x:%02x:%02x:%02x' % (
         (i >> 24) & 255, (i >> 16) & 255, (i >> 8) & 255, i & 255)}]}
    for i in range($start, $end)]
CONF
  p=$(port); EPORTS+=("$p")
  # The emulator's state store opens an SQLite connection per access and leaves its
  # closing to the garbage collector: under this load it runs out of file descriptors
  # ("unable to open database file", 500) unless garbage is collected often and the
  # descriptor limit is raised. Nothing else about it changes.
  cat >"$DIR/emu$e/run.py" <<'RUN'
import gc, sys, threading, time
from sushy_tools.emulator import main
def collect():
    while True:
        time.sleep(0.2)
        gc.collect()
threading.Thread(target=collect, daemon=True).start()
sys.argv[0] = "sushy-emulator"
sys.exit(main.main())
RUN
  (ulimit -n "$(ulimit -Hn)"; exec "$venv/bin/python" "$DIR/emu$e/run.py" \
    --config "$DIR/emu$e/emulator.conf" -i 127.0.0.1 -p "$p") >"$DIR/emu$e.log" 2>&1 & PIDS+=($!)
done

AP=$(port)
IRONIC_CONDUCTOR__SYNC_POWER_STATE_INTERVAL=${INTERVAL:-10} \
IRONIC_CONDUCTOR__SYNC_POWER_STATE_WORKERS="$W" \
IRONIC_CONDUCTOR__AUTOMATED_CLEAN=false IRONIC_LOG__FILTER=warn \
  "$T/ironic" --listen "127.0.0.1:$AP" --database "sqlite://$DIR/ironic.sqlite" --host bench \
  >"$DIR/ironic.log" 2>&1 & PIDS+=($!)
export IRONIC_PID=$! EMULATOR_PIDS="${PIDS[*]:0:$E}"
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$AP/" >/dev/null && break; sleep 0.1; done
for p in "${EPORTS[@]}"; do
  for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$p/redfish/v1/" >/dev/null && break; sleep 0.1; done
done

python3 - "$AP" "$N" "$per" "$ROUNDS" "$W" "$E" "${EPORTS[@]}" <<'PY'
import http.client, json, os, re, sys, time
from concurrent.futures import ThreadPoolExecutor
ap, n, per, rounds, workers, emus = (int(x) for x in sys.argv[1:7])
eports = [int(p) for p in sys.argv[7:]]
hdr = {"X-OpenStack-Ironic-API-Version": "1.115", "Content-Type": "application/json"}
def call(m, p, b=None):
    c = http.client.HTTPConnection("127.0.0.1", ap, timeout=300)
    c.request(m, p, None if b is None else json.dumps(b), hdr)
    r = c.getresponse(); body = r.read(); c.close()
    return r.status, body
def enroll(i):
    di = {"redfish_address": "http://127.0.0.1:%d" % eports[i // per],
          "redfish_system_id": "00000000-0000-4000-8000-%012d" % i}
    s, b = call("POST", "/v1/nodes", {"driver": "redfish", "name": "n%d" % i, "driver_info": di})
    assert s == 201, b
deadline = time.time() + 1800
def manage(i):
    # One verification at a time per client thread: one emulator stands for many BMCs,
    # and a thousand verifications at once would swamp it.
    s, b = call("PUT", "/v1/nodes/n%d/states/provision" % i, {"target": "manage"})
    assert s == 202, b
    while True:
        s, b = call("GET", "/v1/nodes/n%d?fields=provision_state,last_error" % i)
        doc = json.loads(b)
        if doc["provision_state"] == "manageable":
            return
        assert doc["provision_state"] != "enroll" or doc["last_error"] is None, doc
        assert time.time() < deadline, doc
        time.sleep(0.02)
t = time.time()
with ThreadPoolExecutor(16) as ex:
    list(ex.map(enroll, range(n)))
enrolled = time.time() - t
with ThreadPoolExecutor(workers) as ex:
    list(ex.map(manage, range(n)))
def count(state):
    total, path = 0, "/v1/nodes?provision_state=%s&fields=uuid&limit=1000" % state
    while path:
        s, b = call("GET", path)
        doc = json.loads(b)
        total += len(doc["nodes"])
        nxt = doc.get("next")
        path = nxt[nxt.index("/v1/"):] if nxt else None
    return total
while True:
    done = count("manageable")
    if done >= n:
        break
    assert time.time() < deadline, "nodes did not all reach manageable"
    time.sleep(1)
managed = time.time() - t
def metric():
    s, b = call("GET", "/metrics")
    text = b.decode()
    def val(name):
        m = re.search(r"^%s(?:\{[^}]*\})? ([0-9.e+-]+)$" % name, text, re.M)
        return float(m.group(1)) if m else 0.0
    return val("ironic_power_sync_round_seconds_sum"), val("ironic_power_sync_round_seconds_count"), val("ironic_power_sync_nodes_total")
# Rounds that start once every node is manageable (the first may have begun earlier).
s0, c0, k0 = metric()
while True:
    s1, c1, k1 = metric()
    if c1 >= c0 + 1:
        break
    assert time.time() < deadline
    time.sleep(0.2)
def cpu(pids):
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in pids:
        with open("/proc/%s/stat" % p) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / tick
    return total
ironic = [os.environ["IRONIC_PID"]]
emulators = os.environ["EMULATOR_PIDS"].split()
cpu0 = (cpu(ironic), cpu(emulators), time.time())
times = []
while len(times) < rounds:
    s2, c2, k2 = metric()
    if c2 > c1:
        times.append(((s2 - s1) / (c2 - c1), (k2 - k1) / (c2 - c1)))
        s1, c1, k1 = s2, c2, k2
    assert time.time() < deadline
    time.sleep(0.2)
print("%d Redfish nodes over %d emulator(s), %d sync workers" % (n, emus, workers))
print("  enrolled in %.1f s; all managed (%d at a time) after %.1f s" % (enrolled, workers, managed))
cpu1 = (cpu(ironic), cpu(emulators), time.time())
for i, (sec, nodes) in enumerate(times):
    print("  round %d: %.2f s for %d nodes (%.0f nodes/s)" % (i + 1, sec, nodes, nodes / sec if sec else 0))
wall = cpu1[2] - cpu0[2]
print("  CPU while measured (%.0f s, rounds and the pauses between): ironic %.0f%%, emulators %.0f%% (of one core; the machine has %d)"
      % (wall, 100 * (cpu1[0] - cpu0[0]) / wall, 100 * (cpu1[1] - cpu0[1]) / wall, os.cpu_count()))
PY
