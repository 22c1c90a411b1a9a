#!/usr/bin/env python3
"""Soak and fault injection for the split deployment (see bench/soak.sh for how to run it
and docs/operations.md, "Soak and fault injection", for what it prints).

One ironic-api and three ironic-conductor processes on PostgreSQL and a RabbitMQ vhost of
their own, every process reaching PostgreSQL through a TCP proxy of this harness (one per
process, so that the database can be cut for everyone or for one conductor). For
DURATION seconds, many clients run allocation/deallocation and node life cycles
(deploy, undeploy with automated cleaning, manage, provide) while the harness kills
conductors with SIGKILL and starts them again, restarts the broker, cuts the database for
everyone and cuts one conductor's database link. Then it lets the system settle and
checks what must hold. Loopback only; every wait is bounded.

Standard library only (http.client, threads, asyncio for the proxies).
"""

import asyncio
import http.client
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time

T = os.environ["T"]  # directory of the binaries
DB_NAME = os.environ["DB_NAME"]
VHOST = os.environ["VHOST"]
WORK = os.environ["WORK"]  # scratch directory (logs)
DURATION = float(os.environ.get("DURATION", "600"))
ALLOC_CLIENTS = int(os.environ.get("ALLOC_CLIENTS", "8"))
CYCLE_CLIENTS = int(os.environ.get("CYCLE_CLIENTS", "4"))
ALLOC_NODES = int(os.environ.get("ALLOC_NODES", "40"))
NODES_PER_CYCLER = int(os.environ.get("NODES_PER_CYCLER", "4"))
FAULT_EVERY = float(os.environ.get("FAULT_EVERY", "25"))
BROKER_RESTART = os.environ.get("BROKER_RESTART", "app")  # app | connections | off
SEED = int(os.environ.get("SEED", str(int(time.time()))))
V = "1.60"
PG = ("127.0.0.1", 5432)
HOSTS = ["soak-a", "soak-b", "soak-c"]
random.seed(SEED)

TRANSIENT = {
    "deploying", "wait call-back", "cleaning", "clean wait", "verifying", "inspecting",
    "deleting", "adopting", "rescuing", "unrescuing", "rescue wait", "inspect wait",
    "servicing", "service wait", "enroll verifying",
}


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------------------
# TCP proxies between the processes and PostgreSQL, each cuttable.

class Proxy:
    def __init__(self, name):
        self.name = name
        self.down = False
        self.conns = set()
        self.port = None

    async def start(self):
        server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        self.port = server.sockets[0].getsockname()[1]
        self.server = server

    async def handle(self, cr, cw):
        if self.down:
            cw.close()
            return
        try:
            sr, sw = await asyncio.open_connection(*PG)
        except OSError:
            cw.close()
            return
        pair = (cw, sw)
        self.conns.add(pair)

        async def pipe(r, w):
            try:
                while True:
                    data = await r.read(65536)
                    if not data:
                        break
                    w.write(data)
                    await w.drain()
            except (OSError, asyncio.CancelledError):
                pass
            finally:
                w.close()

        await asyncio.gather(pipe(cr, sw), pipe(sr, cw), return_exceptions=True)
        self.conns.discard(pair)

    def cut(self):
        self.down = True
        for cw, sw in list(self.conns):
            cw.close()
            sw.close()

    def restore(self):
        self.down = False


class Proxies:
    """The proxies run in an event loop of their own, in a thread."""

    def __init__(self, names):
        self.loop = asyncio.new_event_loop()
        self.proxies = {n: Proxy(n) for n in names}
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        for p in self.proxies.values():
            asyncio.run_coroutine_threadsafe(p.start(), self.loop).result(10)

    def url(self, name):
        return f"postgres://postgres@127.0.0.1:{self.proxies[name].port}/{DB_NAME}"

    def cut(self, names):
        for n in names:
            self.loop.call_soon_threadsafe(self.proxies[n].cut)

    def restore(self, names):
        for n in names:
            self.loop.call_soon_threadsafe(self.proxies[n].restore)


# ---------------------------------------------------------------------------------------
# Processes

class Procs:
    def __init__(self, proxies):
        self.proxies = proxies
        self.procs = {}
        self.api_port = None
        self.base_env = dict(os.environ)
        self.base_env.update({
            "IRONIC_AMQP__URL": f"amqp://guest:guest@127.0.0.1:5672/{VHOST}",
            "IRONIC_CONDUCTOR__SHUTDOWN_SETTLE_TIME": "0",
            "IRONIC_CONDUCTOR__HTTP_LISTEN": "127.0.0.1:0",
            "RUST_LOG": os.environ.get("RUST_LOG", "info"),
        })

    def start(self, name):
        env = dict(self.base_env)
        env["IRONIC_DATABASE__URL"] = self.proxies.url(name)
        out = open(os.path.join(WORK, f"{name}.log"), "ab")
        if name == "api":
            args = [f"{T}/ironic-api", "--listen", f"127.0.0.1:{self.api_port}", "--host", "soak-api"]
        else:
            args = [f"{T}/ironic-conductor", "--host", name]
        self.procs[name] = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=out)

    def kill9(self, name):
        p = self.procs.get(name)
        if p and p.poll() is None:
            p.send_signal(signal.SIGKILL)
            p.wait(10)

    def stop_all(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs.values():
            try:
                p.wait(90)
            except subprocess.TimeoutExpired:
                p.kill()


# ---------------------------------------------------------------------------------------
# HTTP client with statistics

class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.sent = 0
        self.by_status = {}
        self.stall = 0.0
        self.stall_what = ""
        self.unavailable = {}

    def record(self, method, path, status, took, body):
        with self.lock:
            self.sent += 1
            self.by_status[status] = self.by_status.get(status, 0) + 1
            if took > self.stall:
                self.stall = took
                self.stall_what = f"{method} {path} -> {status}"
            if status >= 500:
                msg = body
                try:
                    msg = json.loads(json.loads(body)["error_message"])["faultstring"]
                except Exception:
                    pass
                key = f"{status} {msg[:110]}"
                self.unavailable[key] = self.unavailable.get(key, 0) + 1


STATS = Stats()


def call(method, path, body=None, timeout=120, record=True):
    """One request; returns (status, parsed body or text). Status 0: no connection."""
    start = time.monotonic()
    try:
        c = http.client.HTTPConnection("127.0.0.1", PROCS.api_port, timeout=timeout)
        headers = {"X-OpenStack-Ironic-API-Version": V}
        data = None
        if body is not None:
            data = json.dumps(body)
            headers["Content-Type"] = "application/json"
        c.request(method, path, data, headers)
        r = c.getresponse()
        text = r.read().decode()
        status = r.status
        c.close()
    except (OSError, http.client.HTTPException) as e:
        status, text = 0, str(e)
    took = time.monotonic() - start
    if record:
        STATS.record(method, path.split("?")[0], status, took, text)
    try:
        return status, json.loads(text) if text else None
    except ValueError:
        return status, text


# ---------------------------------------------------------------------------------------
# Workload

STOP = threading.Event()
CREATED = {}  # allocation uuid -> "live" | "deleting" (a DELETE was sent) | "deleted"
CREATED_LOCK = threading.Lock()


def alloc_client(i):
    n = 0
    while not STOP.is_set():
        n += 1
        st, a = call("POST", "/v1/allocations", {"resource_class": "rc-soak", "name": f"soak-{i}-{n}"})
        if st != 201:
            time.sleep(0.2)
            continue
        u = a["uuid"]
        with CREATED_LOCK:
            CREATED[u] = "live"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not STOP.is_set():
            st, a = call("GET", f"/v1/allocations/{u}")
            if st == 200 and a["state"] != "allocating":
                break
            time.sleep(0.1)
        with CREATED_LOCK:
            # From now on a 404 is no loss: a DELETE whose answer was lost (a 503 while
            # the database connection broke mid-statement) may have been carried out.
            CREATED[u] = "deleting"
        for _ in range(20):
            st, _b = call("DELETE", f"/v1/allocations/{u}")
            if st in (204, 404):
                with CREATED_LOCK:
                    CREATED[u] = "deleted"
                break
            time.sleep(0.5)


RECOVER = {
    "deploy failed": "deleted",
    "clean failed": "manage",
    "manageable": "provide",
    "active": "deleted",
    "enroll": "manage",
    "inspect failed": "manage",
}
CYCLE = ["active", "deleted", "manage", "provide"]
GOAL = {"active": "active", "deleted": "available", "manage": "manageable", "provide": "available"}
CYCLES = {"done": 0, "recovered": 0}


def wait_settled(name, limit=90):
    """Waits for a node to leave transient states; returns its state or None."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        st, n = call("GET", f"/v1/nodes/{name}")
        if st == 200 and n["provision_state"] not in TRANSIENT and not n.get("target_provision_state"):
            return n["provision_state"]
        time.sleep(0.2)
    return None


def cycle_client(i):
    names = [f"cyc-{i}-{k}" for k in range(NODES_PER_CYCLER)]
    step = {n: 0 for n in names}
    while not STOP.is_set():
        for name in names:
            if STOP.is_set():
                break
            verb = CYCLE[step[name] % len(CYCLE)]
            st, _ = call("PUT", f"/v1/nodes/{name}/states/provision", {"target": verb})
            if st == 202:
                state = wait_settled(name)
                if state == GOAL[verb]:
                    step[name] += 1
                    CYCLES["done"] += 1
                    continue
            else:
                state = wait_settled(name, 30)
            # Off the cycle (a fault): bring it back to available, then start again.
            for _ in range(6):
                if state == "available" or state is None or STOP.is_set():
                    break
                fix = RECOVER.get(state)
                if fix is None:
                    break
                call("PUT", f"/v1/nodes/{name}/states/provision", {"target": fix})
                state = wait_settled(name)
            if state == "available":
                step[name] = 0
                CYCLES["recovered"] += 1
            time.sleep(0.2)


# ---------------------------------------------------------------------------------------
# Faults and take-over measurement

FAULTS = []
TAKEOVERS = []


def alive_conductors():
    st, body = call("GET", "/v1/conductors", record=False, timeout=10)
    if st != 200:
        return None
    return {c["hostname"] for c in body["conductors"] if c["alive"]}


def wait_for(pred, limit):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.1)
    return False


def fault_kill():
    victim = random.choice(HOSTS)
    PROCS.kill9(victim)
    t0 = time.monotonic()
    gone = wait_for(lambda: (alive_conductors() or {victim}).isdisjoint({victim}), 60)
    took = time.monotonic() - t0
    TAKEOVERS.append(took if gone else float("inf"))
    FAULTS.append(f"kill -9 {victim}: seen dead after {took:.1f} s")
    time.sleep(random.uniform(1, 5))
    PROCS.start(victim)


def fault_broker():
    if BROKER_RESTART == "off":
        return
    t0 = time.monotonic()
    if BROKER_RESTART == "app":
        ok = subprocess.run(["rabbitmqctl", "-q", "stop_app"], capture_output=True).returncode == 0
        time.sleep(2)
        subprocess.run(["rabbitmqctl", "-q", "start_app"], capture_output=True)
        how = "broker restarted (stop_app/start_app)" if ok else "broker restart failed"
    else:
        subprocess.run(["rabbitmqctl", "-q", "close_all_connections", "--vhost", VHOST, "soak"],
                       capture_output=True)
        how = "every bus connection closed"
    FAULTS.append(f"{how} in {time.monotonic() - t0:.1f} s")


def fault_db_all():
    PROXIES.cut(list(PROXIES.proxies))
    secs = float(os.environ.get("DB_OUTAGE", "30"))
    time.sleep(secs)
    PROXIES.restore(list(PROXIES.proxies))
    FAULTS.append(f"database cut for everyone for {secs:.0f} s")


def fault_db_one():
    victim = random.choice(HOSTS)
    PROXIES.cut([victim])
    secs = 15
    time.sleep(secs)
    PROXIES.restore([victim])
    FAULTS.append(f"database link of {victim} cut for {secs} s")


def faulter():
    kinds = [fault_kill, fault_kill, fault_broker, fault_db_all, fault_db_one]
    order = []
    while not STOP.is_set():
        if STOP.wait(random.uniform(FAULT_EVERY * 0.7, FAULT_EVERY * 1.3)):
            break
        if not order:
            order = kinds[:]
            random.shuffle(order)
        f = order.pop()
        log(f"fault: {f.__name__}")
        f()
        log(f"  {FAULTS[-1] if FAULTS else ''}")


# ---------------------------------------------------------------------------------------
# Checks

def psql(sql):
    out = subprocess.run(
        ["psql", "-At", f"postgres://postgres@127.0.0.1:5432/{DB_NAME}", "-c", sql],
        capture_output=True, text=True, check=True)
    return [line.split("|") for line in out.stdout.strip().splitlines() if line]


def main():
    global PROXIES, PROCS
    PROXIES = Proxies(["api"] + HOSTS)
    PROCS = Procs(PROXIES)
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    PROCS.api_port = s.getsockname()[1]
    s.close()
    for h in HOSTS:
        PROCS.start(h)
    PROCS.start("api")
    if not wait_for(lambda: alive_conductors() == set(HOSTS), 60):
        sys.exit("the deployment did not come up; logs in " + WORK)
    log(f"up: api on 127.0.0.1:{PROCS.api_port}, conductors {HOSTS}, seed {SEED}")

    # Nodes: a pool for allocations, and a few per life-cycle client.
    def make(name, rc):
        st, n = call("POST", "/v1/nodes", {"driver": "fake-hardware", "name": name,
                                           "resource_class": rc}, record=False)
        assert st == 201, (st, n)
        for verb, goal in (("manage", "manageable"), ("provide", "available")):
            call("PUT", f"/v1/nodes/{name}/states/provision", {"target": verb}, record=False)
            assert wait_settled(name) == goal, name
    for k in range(ALLOC_NODES):
        make(f"pool-{k}", "rc-soak")
    for i in range(CYCLE_CLIENTS):
        for k in range(NODES_PER_CYCLER):
            make(f"cyc-{i}-{k}", "rc-cycle")
    log(f"{ALLOC_NODES} pool nodes, {CYCLE_CLIENTS * NODES_PER_CYCLER} cycled nodes; "
        f"running {DURATION:.0f} s with {ALLOC_CLIENTS} allocation and {CYCLE_CLIENTS} life-cycle clients")

    threads = [threading.Thread(target=alloc_client, args=(i,), daemon=True) for i in range(ALLOC_CLIENTS)]
    threads += [threading.Thread(target=cycle_client, args=(i,), daemon=True) for i in range(CYCLE_CLIENTS)]
    threads.append(threading.Thread(target=faulter, daemon=True))
    for t in threads:
        t.start()
    end = time.monotonic() + DURATION
    while time.monotonic() < end:
        time.sleep(min(30, max(0.1, end - time.monotonic())))
        log(f"sent {STATS.sent}, statuses {dict(sorted(STATS.by_status.items()))}, cycles {CYCLES}, faults {len(FAULTS)}")
    STOP.set()
    for t in threads:
        t.join(180)
    # Every process up again (a kill may have happened at the very end).
    for name, p in PROCS.procs.items():
        if p.poll() is not None:
            PROCS.start(name)
    PROXIES.restore(list(PROXIES.proxies))
    log("settling")
    ok_settle = wait_for(lambda: not psql(
        "SELECT 1 FROM nodes WHERE reservation IS NOT NULL OR provision_state IN ("
        + ",".join(f"'{s}'" for s in TRANSIENT) + ") "
        "UNION ALL SELECT 1 FROM allocations WHERE state = 'allocating' LIMIT 1"), 120)

    # What must hold.
    lost = []
    for u, what in CREATED.items():
        st, _ = call("GET", f"/v1/allocations/{u}", record=False)
        if what == "live" and st == 404:
            lost.append(u)
    double = psql("SELECT node_id, count(*) FROM allocations WHERE state = 'active' "
                  "GROUP BY node_id HAVING count(*) > 1")
    mismatched = psql("SELECT n.uuid FROM nodes n JOIN allocations a ON a.id = n.allocation_id "
                      "WHERE a.node_id IS DISTINCT FROM n.id")
    allocating = psql("SELECT uuid FROM allocations WHERE state = 'allocating'")
    locked = psql("SELECT name, reservation FROM nodes WHERE reservation IS NOT NULL")
    transient = psql("SELECT name, provision_state FROM nodes WHERE provision_state IN ("
                     + ",".join(f"'{s}'" for s in TRANSIENT) + ")")
    PROCS.stop_all()

    print()
    print("== soak results")
    print(f"duration                      {DURATION:.0f} s, seed {SEED}")
    print(f"requests sent                 {STATS.sent}")
    print(f"  by status                   {dict(sorted(STATS.by_status.items()))}")
    print(f"allocations created (201)     {len(CREATED)}")
    print(f"life cycles completed         {CYCLES['done']} steps, {CYCLES['recovered']} recoveries after a fault")
    print(f"faults                        {len(FAULTS)}")
    for f in FAULTS:
        print(f"  {f}")
    print(f"lost (201 then 404)           {len(lost)} {lost[:5]}")
    print(f"nodes with two allocations    {len(double) + len(mismatched)} {double[:5]} {mismatched[:5]}")
    print(f"allocations left allocating   {len(allocating)} {allocating[:5]}")
    print(f"nodes left locked             {len(locked)} {locked[:5]}")
    print(f"nodes left in a transient state {len(transient)} {transient[:5]}")
    print(f"settled after the faults      {'yes' if ok_settle else 'NO (within 120 s)'}")
    print(f"longest client-visible stall  {STATS.stall:.2f} s ({STATS.stall_what})")
    worst = max(TAKEOVERS) if TAKEOVERS else 0
    print(f"worst take-over (kill -> API sees it dead) {worst:.1f} s over {len(TAKEOVERS)} kills")
    print("5xx answers by message:")
    for k, v in sorted(STATS.unavailable.items(), key=lambda kv: -kv[1])[:15]:
        print(f"  {v:6d}  {k}")
    bad = lost or double or mismatched or allocating or locked or transient or not ok_settle
    print("RESULT:", "FAIL" if bad else "PASS")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
