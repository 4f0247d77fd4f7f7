#!/usr/bin/python3
"""Runs `ferry-info --json` and checks what it says about the soft-RoCE device (suite 'rdma').

Usage (inside tools/softroce/ferry-vm): check_ferry_info.py PATH_TO_FERRY_INFO

Expects the verbs backend to be available and created, and to list $FERRY_RDMA_DEV (rxe0) port 1
with state ACTIVE, a RoCEv2 GID mapping $FERRY_RDMA_ADDR (::ffff:a.b.c.d), and positive active
MTU, max_sge and max_inline. Prints every problem found and exits 1 if there is any.
"""
import json
import os
import subprocess
import sys


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    dev = os.environ.get("FERRY_RDMA_DEV", "rxe0")
    addr = os.environ.get("FERRY_RDMA_ADDR")
    if not addr:
        print("FERRY_RDMA_ADDR is not set: run this inside tools/softroce/ferry-vm", file=sys.stderr)
        return 2
    run = subprocess.run([sys.argv[1], "--json"], capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        print(f"ferry-info --json exited {run.returncode}: {run.stderr}", file=sys.stderr)
        return 1
    doc = json.loads(run.stdout)  # raises (non-zero exit) on invalid JSON
    problems = []

    verbs = [b for b in doc.get("backends", []) if b.get("name") == "verbs"]
    if len(verbs) != 1:
        print(f"expected one 'verbs' backend, found {len(verbs)}", file=sys.stderr)
        return 1
    b = verbs[0]
    if not b.get("available") or not b.get("created"):
        problems.append(f"verbs backend not usable: available={b.get('available')} "
                        f"reason={b.get('reason')!r} created={b.get('created')} "
                        f"error={b.get('error')!r}")
    ports = [d for d in b.get("devices", []) if d.get("name") == dev + ":1"]
    if len(ports) != 1:
        problems.append(f"{dev}:1 not listed; devices: "
                        f"{[d.get('name') for d in b.get('devices', [])]}")
    else:
        port = ports[0]
        attrs = port.get("attributes", {})
        if port.get("kind") != "rdma":
            problems.append(f"{dev}:1 kind is {port.get('kind')!r}, not 'rdma'")
        if attrs.get("state") != "ACTIVE":
            problems.append(f"{dev}:1 state is {attrs.get('state')!r}, not 'ACTIVE'")
        if attrs.get("link_layer") != "Ethernet":
            problems.append(f"{dev}:1 link_layer is {attrs.get('link_layer')!r}")
        want_gid = f"::ffff:{addr} (RoCEv2)"
        gids = [g.strip() for g in attrs.get("gids", "").split(",")]
        if not any(g.endswith(": " + want_gid) for g in gids):
            problems.append(f"{dev}:1 has no GID '{want_gid}'; gids: {attrs.get('gids')!r}")
        for key, allowed in (("active_mtu", {256, 512, 1024, 2048, 4096}),
                             ("max_sge", None), ("max_inline", None)):
            try:
                value = int(attrs.get(key, ""))
            except ValueError:
                problems.append(f"{dev}:1 {key} is {attrs.get(key)!r}, not a number")
                continue
            if value <= 0 or (allowed is not None and value not in allowed):
                problems.append(f"{dev}:1 {key} = {value} is not plausible")
        print(f"{dev}:1 state={attrs.get('state')} gids={attrs.get('gids')!r} "
              f"active_mtu={attrs.get('active_mtu')} max_sge={attrs.get('max_sge')} "
              f"max_inline={attrs.get('max_inline')}")
    for p in problems:
        print("FAIL: " + p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
