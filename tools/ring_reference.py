#!/usr/bin/env python3
"""Independent reference of upstream's (tooz) hash ring, used to pin known
node -> conductor mappings in crates/ironic-model/src/ring_pinned.in.

Algorithm (reference §6): for each host, a cumulative md5 over the host name
repeated; 2**exponent positions per host; a key maps to the first position
strictly greater than md5(key), wrapping around."""
import bisect
import hashlib
import sys

def ring(hosts, exponent=5):
    points = {}
    for h in sorted(set(hosts)):
        d = hashlib.md5(h.encode())
        for _ in range(2 ** exponent):
            d.update(h.encode())
            points[int(d.hexdigest(), 16)] = h
    return points

def owner(points, key):
    pos = sorted(points)
    p = int(hashlib.md5(key.encode()).hexdigest(), 16)
    i = bisect.bisect_right(pos, p)
    if i == len(pos):
        i = 0
    return points[pos[i]]

if __name__ == "__main__":
    r = ring(["conductor-1", "conductor-2", "conductor-3"])
    keys = ["00000000-0000-0000-0000-000000000000",
            "7c1a0f2e-8b43-4c6a-9d1e-2f3a4b5c6d7e",
            "11111111-2222-3333-4444-555555555555",
            "aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"]
    sys.stdout.write("[" + ", ".join('"%s"' % owner(r, k) for k in keys) + "]\n")
