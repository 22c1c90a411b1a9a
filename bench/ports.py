#!/usr/bin/env python3
"""Port creation and listing beside node figures, through any Ironic-compatible API.

Creates N fake-hardware nodes, then P ports per node (C clients, each POST goes to the
node's conductor under its lock), and prints side by side: nodes/s and ports/s created
(with POST latency p50/p99), a full walk of /v1/nodes and of /v1/ports in pages of
1000, and C clients reading a node's ports (`?node=<uuid>`) and a node for R seconds.
Checks that every port was created once and that the walks see them all. Deletes the
nodes at the end (their ports go with them). Stdlib only; talks only to the URL given;
every wait is bounded.
Usage: ports.py URL [-n 1000] [-p 4] [-c 8] [-r 10] [--same-node] [--microversion 1.61]
"""
import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))] if s else 0.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("-n", type=int, default=1000)
    ap.add_argument("-p", type=int, default=4)
    ap.add_argument("-c", type=int, default=8)
    ap.add_argument("-r", type=float, default=10.0, help="seconds of each read phase")
    ap.add_argument("--microversion", default="1.61")
    ap.add_argument("--same-node", action="store_true",
                    help="create each node's ports concurrently (node lock contention)")
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    hdr = {"X-OpenStack-Ironic-API-Version": a.microversion, "Content-Type": "application/json"}
    local = threading.local()
    tag = int(time.time() * 1000) % 1000000

    def call(method, path, body=None):
        for attempt in range(2):
            c = getattr(local, "conn", None)
            if c is None:
                c = local.conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
            try:
                c.request(method, path, body=None if body is None else json.dumps(body), headers=hdr)
                r = c.getresponse()
                return r.status, r.read()
            except (http.client.HTTPException, OSError):
                c.close()
                local.conn = None
                if attempt == 1:
                    raise
        raise RuntimeError("unreachable")

    def timed(method, path, body, want, what):
        for _ in range(50):
            t = time.perf_counter()
            st, data = call(method, path, body)
            dt = time.perf_counter() - t
            # A node lock held by a concurrent write of the same node: try again.
            if st == 409 and b"is locked" in data:
                continue
            if st != want:
                sys.exit("%s: %s %s" % (what, st, data[:300]))
            return data, dt
        sys.exit("%s: the node stayed locked" % what)

    def create_node(i):
        data, dt = timed("POST", "/v1/nodes", {"driver": "fake-hardware", "name": "pb-%d-%d" % (tag, i)}, 201, "create node")
        return json.loads(data)["uuid"], dt

    def create_port(arg):
        node, i, j = arg
        mac = "%02x:%02x:%02x:%02x:%02x:%02x" % (0x52, (tag >> 8) & 0xff, tag & 0xff, (i >> 8) & 0xff, i & 0xff, j)
        data, dt = timed("POST", "/v1/ports", {"address": mac, "node_uuid": node}, 201, "create port")
        return json.loads(data)["uuid"], dt

    def walk(path, key):
        n, marker, t0 = 0, None, time.perf_counter()
        for _ in range(100000):
            p = path + ("&marker=" + marker if marker else "")
            st, data = call("GET", p)
            if st != 200:
                sys.exit("walk %s: %s %s" % (path, st, data[:300]))
            page = json.loads(data)[key]
            n += len(page)
            if len(page) < 1000:
                break
            marker = page[-1]["uuid"]
        return n, time.perf_counter() - t0

    def read_loop(paths):
        lat, deadline, i = [], time.time() + a.r, 0
        while time.time() < deadline:
            t = time.perf_counter()
            st, data = call("GET", paths[i % len(paths)])
            lat.append(time.perf_counter() - t)
            if st != 200:
                sys.exit("read %s: %s %s" % (paths[i % len(paths)], st, data[:200]))
            i += 1
        return lat

    rows = []
    with ThreadPoolExecutor(a.c) as ex:
        t0 = time.perf_counter()
        nodes = list(ex.map(create_node, range(a.n)))
        el = time.perf_counter() - t0
        lat = [d for _, d in nodes]
        rows.append(("create nodes", a.n / el, pct(lat, 50), pct(lat, 99)))
        uuids = [u for u, _ in nodes]
        # Port j of every node, then port j+1: concurrent clients write different nodes,
        # as enrolment tools do (one node's ports one after the other). --same-node
        # sends a node's ports together instead, to measure its lock contention.
        if a.same_node:
            jobs = [(uuids[i], i, j) for i in range(a.n) for j in range(a.p)]
        else:
            jobs = [(uuids[i], i, j) for j in range(a.p) for i in range(a.n)]
        t0 = time.perf_counter()
        ports = list(ex.map(create_port, jobs))
        el = time.perf_counter() - t0
        lat = [d for _, d in ports]
        rows.append(("create ports (%d per node%s)" % (a.p, ", same node" if a.same_node else ""), len(jobs) / el, pct(lat, 50), pct(lat, 99)))
        if len({p for p, _ in ports}) != len(jobs):
            sys.exit("duplicate port uuids")

        n, el = walk("/v1/nodes?limit=1000&fields=uuid", "nodes")
        rows.append(("walk /v1/nodes (%d, pages of 1000)" % n, n / el, None, None))
        n, el = walk("/v1/ports?limit=1000", "ports")
        if n < len(jobs):
            sys.exit("the port walk saw %d of %d ports" % (n, len(jobs)))
        rows.append(("walk /v1/ports (%d, pages of 1000)" % n, n / el, None, None))
        n, el = walk("/v1/ports/detail?limit=1000", "ports")
        rows.append(("walk /v1/ports/detail (%d)" % n, n / el, None, None))

        for label, paths in [
            ("GET /v1/nodes/{uuid}", ["/v1/nodes/%s" % x for x in uuids]),
            ("GET /v1/ports?node={uuid}", ["/v1/ports?node=%s" % x for x in uuids]),
            ("GET /v1/nodes/{uuid}/ports/detail", ["/v1/nodes/%s/ports/detail" % x for x in uuids]),
            ("GET /v1/ports/{uuid}", ["/v1/ports/%s" % p for p, _ in ports]),
        ]:
            shards = [paths[k::a.c] for k in range(a.c)]
            t0 = time.perf_counter()
            lats = [x for part in ex.map(read_loop, shards) for x in part]
            el = time.perf_counter() - t0
            rows.append((label + " (%d clients)" % a.c, len(lats) / el, pct(lats, 50), pct(lats, 99)))

        list(ex.map(lambda x: timed("DELETE", "/v1/nodes/%s" % x, None, 204, "delete node"), uuids))
        st, data = call("GET", "/v1/ports?limit=1")
        left = json.loads(data)["ports"] if st == 200 else None
        if left:
            sys.exit("ports left after deleting their nodes: %s" % left)

    print("%-48s %10s %9s %9s" % ("phase", "per s", "p50 ms", "p99 ms"))
    for name, rate, p50, p99 in rows:
        f = lambda v: "-" if v is None else "%.1f" % (v * 1000)
        print("%-48s %10.0f %9s %9s" % (name, rate, f(p50), f(p99)))


if __name__ == "__main__":
    main()
