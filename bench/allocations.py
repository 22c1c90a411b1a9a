#!/usr/bin/env python3
"""Allocation throughput through any Ironic-compatible API.

Sets up N available fake-hardware nodes of a fresh resource class (automated cleaning
off), then C clients POST N allocations for that class as fast as they can. Prints:
allocations/s end to end (first POST until every allocation is `active`), POST latency
p50/p99, and deallocations/s (C clients DELETE every allocation). Checks that every
allocation ended `active` on a distinct node. Stdlib only; talks only to the URL given;
every wait is bounded.
Usage: allocations.py URL [-n 1000] [-c 8] [--microversion 1.60]
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
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("-n", type=int, default=1000)
    p.add_argument("-c", type=int, default=8)
    p.add_argument("--microversion", default="1.60")
    p.add_argument("--timeout", type=float, default=900)
    a = p.parse_args()
    u = urllib.parse.urlparse(a.url)
    hdr = {"X-OpenStack-Ironic-API-Version": a.microversion, "Content-Type": "application/json"}
    rc = "alloc-bench-%d" % int(time.time() * 1000)
    local = threading.local()

    def call(method, path, body=None):
        # One keep-alive connection per client thread.
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

    def expect(st, data, want, what):
        if st != want:
            sys.exit("%s: %s %s" % (what, st, data[:300]))

    def create(i):
        st, data = call("POST", "/v1/nodes",
                        {"driver": "fake-hardware", "resource_class": rc, "automated_clean": False})
        expect(st, data, 201, "create node")
        return json.loads(data)["uuid"]

    def verb(uuid, target):
        st, data = call("PUT", "/v1/nodes/%s/states/provision" % uuid, {"target": target})
        expect(st, data, 202, target)

    def count_nodes(state):
        n, marker = 0, None
        for _ in range(10000):
            path = "/v1/nodes?resource_class=%s&provision_state=%s&fields=uuid&limit=1000" % (rc, urllib.parse.quote(state))
            if marker:
                path += "&marker=" + marker
            st, data = call("GET", path)
            expect(st, data, 200, "list nodes")
            page = json.loads(data)["nodes"]
            n += len(page)
            if len(page) < 1000:
                return n
            marker = page[-1]["uuid"]
        return n

    def wait_nodes(state):
        deadline = time.time() + a.timeout
        while time.time() < deadline:
            if count_nodes(state) >= a.n:
                return
            time.sleep(0.2)
        sys.exit("timeout waiting for %d nodes in %s" % (a.n, state))

    def allocations(state):
        out, marker = [], None
        for _ in range(10000):
            path = "/v1/allocations?resource_class=%s&state=%s&fields=uuid,node_uuid&limit=1000" % (rc, state)
            if marker:
                path += "&marker=" + marker
            st, data = call("GET", path)
            expect(st, data, 200, "list allocations")
            page = json.loads(data)["allocations"]
            out.extend(page)
            if len(page) < 1000:
                return out
            marker = page[-1]["uuid"]
        return out

    def post_allocation(i):
        t = time.perf_counter()
        st, data = call("POST", "/v1/allocations", {"resource_class": rc})
        dt = time.perf_counter() - t
        expect(st, data, 201, "create allocation")
        return json.loads(data)["uuid"], dt

    def delete_allocation(uuid):
        st, data = call("DELETE", "/v1/allocations/%s" % uuid)
        expect(st, data, 204, "delete allocation")

    with ThreadPoolExecutor(a.c) as ex:
        uuids = list(ex.map(create, range(a.n)))
        list(ex.map(lambda x: verb(x, "manage"), uuids))
        wait_nodes("manageable")
        list(ex.map(lambda x: verb(x, "provide"), uuids))
        wait_nodes("available")

        t0 = time.perf_counter()
        posted = list(ex.map(post_allocation, range(a.n)))
        t_posted = time.perf_counter()
        deadline = time.time() + a.timeout
        while True:
            st, data = call("GET", "/v1/allocations?resource_class=%s&state=allocating&fields=uuid&limit=1" % rc)
            expect(st, data, 200, "list allocations")
            if not json.loads(data)["allocations"]:
                break
            if time.time() > deadline:
                sys.exit("timeout waiting for allocations")
            time.sleep(0.01)
        t1 = time.perf_counter()

        active = allocations("active")
        errors = allocations("error")
        nodes = {x["node_uuid"] for x in active}
        if len(active) != a.n or len(nodes) != a.n or errors:
            sys.exit("expected %d active allocations on distinct nodes, got %d active on %d nodes, %d errors"
                     % (a.n, len(active), len(nodes), len(errors)))

        t2 = time.perf_counter()
        list(ex.map(delete_allocation, [x for x, _ in posted]))
        t3 = time.perf_counter()
        list(ex.map(lambda x: call("DELETE", "/v1/nodes/%s" % x), uuids))

    lat = [dt for _, dt in posted]
    print("N=%d C=%d: allocations %.0f/s end to end (%.2f s; all POSTs answered after %.2f s), "
          "POST p50 %.1f ms p99 %.1f ms, deallocations %.0f/s"
          % (a.n, a.c, a.n / (t1 - t0), t1 - t0, t_posted - t0,
             pct(lat, 50) * 1000, pct(lat, 99) * 1000, a.n / (t3 - t2)))


if __name__ == "__main__":
    main()
