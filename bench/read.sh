#!/usr/bin/env bash
# Read benchmark of the all-in-one server (issue: foundation). Prints requests/s,
# p50 and p99 for GET /v1/nodes/{uuid}, GET /v1/nodes?limit=100 and
# GET /v1/nodes/detail?limit=100 with 8 concurrent clients (wrk, 8 connections on 2
# threads), and the server's resident memory (with its child processes).
#
#   bash bench/read.sh [NODES=1000] [SECONDS=10] [DATABASE_URL]
#   BENCH_URL=http://127.0.0.1:PORT BENCH_PID=PID bash bench/read.sh   # another server,
#       e.g. upstream Ironic for a side-by-side run (BENCH_VERSION sets the microversion)
#
# Needs wrk (apt-get install wrk) and a release build (built here if missing).
# Talks only to 127.0.0.1; every loop is bounded.
set -euo pipefail
cd "$(dirname "$0")/.."
N=${1:-1000}
SECS=${2:-10}
command -v wrk >/dev/null || { echo "needs wrk: apt-get install wrk" >&2; exit 1; }
dir=$(mktemp -d)
VER=${BENCH_VERSION:-1.51}
if [ -n "${BENCH_URL:-}" ]; then
  port=${BENCH_URL##*:}
  pid=${BENCH_PID:?set BENCH_PID to the server process id}
  DB="(external server)"
  trap 'rm -rf "$dir"' EXIT
else
  cargo build -q --release --bin ironic
  DB=${3:-sqlite://$dir/ironic.sqlite}
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  RUST_LOG=${RUST_LOG:-info} ./target/release/ironic --listen "127.0.0.1:$port" --database "$DB" --host bench >"$dir/server.log" 2>&1 &
  pid=$!
  trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
fi
for _ in $(seq 1 100); do curl -sf "http://127.0.0.1:$port/" >/dev/null && break; sleep 0.1; done
# Resident memory of the server and its child processes (upstream forks workers), MiB.
tree() { echo "$1"; for c in $(pgrep -P "$1"); do tree "$c"; done; }
rss() { for p in $(tree "$pid"); do cat "/proc/$p/status" 2>/dev/null; done | awk '/^VmRSS/{s+=$2} END{printf "%.1f", s/1024}'; }
peak() { for p in $(tree "$pid"); do cat "/proc/$p/status" 2>/dev/null; done | awk '/^VmHWM/{s+=$2} END{printf "%.1f", s/1024}'; }
echo "server pid $pid, resident at start: $(rss) MiB"

python3 - "$port" "$N" "$dir/uuids.lua" "$VER" <<'PY'
import http.client, json, sys
port, n, out, ver = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
h = {"X-OpenStack-Ironic-API-Version": ver, "Content-Type": "application/json"}
uuids = []
for i in range(n):
    body = {"driver": "fake-hardware", "name": "rbench-%05d" % i, "resource_class": "rbench",
            "properties": {"cpus": 8, "memory_mb": 16384, "local_gb": 100},
            "driver_info": {"ipmi_address": "10.0.%d.%d" % (i // 250, i % 250), "ipmi_password": "x"},
            "extra": {"rack": "r%d" % (i % 10)}}
    c.request("POST", "/v1/nodes", json.dumps(body), h)
    r = c.getresponse(); data = r.read()
    if r.status != 201:
        sys.exit("create failed: %s %s" % (r.status, data[:200]))
    uuids.append(json.loads(data)["uuid"])
with open(out, "w") as f:
    f.write("uuids = {%s}\n" % ",".join('"%s"' % u for u in uuids))
print("created %d nodes" % n)
PY

cat >"$dir/get.lua" <<LUA
dofile("$dir/uuids.lua")
wrk.headers["X-OpenStack-Ironic-API-Version"] = "$VER"
local i = 0
request = function()
  i = i + 1
  return wrk.format("GET", "/v1/nodes/" .. uuids[(i % #uuids) + 1])
end
LUA
cat >"$dir/list.lua" <<LUA
wrk.headers["X-OpenStack-Ironic-API-Version"] = "$VER"
LUA

run() { # name script path
  local out
  out=$(wrk -t2 -c8 -d"${SECS}s" --latency -s "$2" "http://127.0.0.1:$port$3")
  local rps p50 p99
  rps=$(awk '/^Requests\/sec/{print $2}' <<<"$out")
  p50=$(awk '$1=="50%"{print $2}' <<<"$out")
  p99=$(awk '$1=="99%"{print $2}' <<<"$out")
  local errs
  errs=$(awk '/Non-2xx/{print $NF}' <<<"$out")
  printf '%-32s %10s req/s   p50 %8s   p99 %8s   non-2xx %s\n' "$1" "$rps" "$p50" "$p99" "${errs:-0}"
}
echo "8 concurrent clients, ${SECS}s each, $N nodes, database ${DB%%://*}, microversion $VER"
run "GET /v1/nodes/{uuid}" "$dir/get.lua" "/v1/nodes/x"
run "GET /v1/nodes?limit=100" "$dir/list.lua" "/v1/nodes?limit=100"
run "GET /v1/nodes/detail?limit=100" "$dir/list.lua" "/v1/nodes/detail?limit=100"
echo "server resident memory now: $(rss) MiB (peak $(peak) MiB)"
