#!/usr/bin/env python3
"""enroll -> manageable -> available for N nodes through any Ironic-compatible API.

Creates N fake-hardware nodes, then `manage` and `provide` each with C concurrent
clients (PUT .../states/provision), polling the node list until every node has reached
the state; prints the seconds of each phase and the total. Stdlib only; talks only to
the URL given; every wait is bounded.
Usage: provide.py URL [-n 200] [-c 8] [--microversion 1.51]
"""
import argparse
import http.client
import json
import sys
import time
import urllib.parse
from concurrent.futures import ThreadPoolExecutor


def main():
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("-n", type=int, default=200)
    p.add_argument("-c", type=int, default=8)
    p.add_argument("--microversion", default="1.51")
    p.add_argument("--timeout", type=float, default=600)
    a = p.parse_args()
    u = urllib.parse.urlparse(a.url)
    hdr = {"X-OpenStack-Ironic-API-Version": a.microversion, "Content-Type": "application/json"}
    rc = "provide-%d" % int(time.time())

    def call(method, path, body=None):
        c = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
        c.request(method, path, body=None if body is None else json.dumps(body), headers=hdr)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def create(i):
        st, data = call("POST", "/v1/nodes", {"driver": "fake-hardware", "resource_class": rc})
        if st != 201:
            sys.exit("create failed: %s %s" % (st, data[:200]))
        return json.loads(data)["uuid"]

    def verb(uuid, target):
        st, data = call("PUT", "/v1/nodes/%s/states/provision" % uuid, {"target": target})
        if st != 202:
            sys.exit("%s failed: %s %s" % (target, st, data[:200]))

    def wait_all(state):
        deadline = time.time() + a.timeout
        while time.time() < deadline:
            st, data = call("GET", "/v1/nodes?resource_class=%s&fields=uuid,provision_state&limit=1000" % rc)
            nodes = json.loads(data)["nodes"]
            bad = [n for n in nodes if n["provision_state"] not in (state,)]
            failed = [n for n in bad if "fail" in (n["provision_state"] or "")]
            if failed:
                sys.exit("nodes failed: %s" % failed[:3])
            if len(nodes) >= a.n and not bad:
                return
            time.sleep(0.2)
        sys.exit("timeout waiting for %s" % state)

    with ThreadPoolExecutor(a.c) as ex:
        t0 = time.time()
        uuids = list(ex.map(create, range(a.n)))
        t1 = time.time()
        list(ex.map(lambda x: verb(x, "manage"), uuids))
        wait_all("manageable")
        t2 = time.time()
        list(ex.map(lambda x: verb(x, "provide"), uuids))
        wait_all("available")
        t3 = time.time()
        list(ex.map(lambda x: call("DELETE", "/v1/nodes/%s" % x), uuids))
    print("N=%d C=%d: create %.2f s (%.0f nodes/s), manage %.2f s, provide (automated cleaning) %.2f s, enroll->available %.2f s"
          % (a.n, a.c, t1 - t0, a.n / (t1 - t0), t2 - t1, t3 - t2, t3 - t1))


if __name__ == "__main__":
    main()
