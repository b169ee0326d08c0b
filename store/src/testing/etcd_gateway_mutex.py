#!/usr/bin/env python3
"""A second, independent client of etcd's native mutex for the tests: it takes
a lock the way go.etcd.io/etcd/client/v3/concurrency.Mutex does, over etcd's
v3 JSON gateway (`/v3/...` on the client URL), with the standard library only.

    etcd_gateway_mutex.py ENDPOINT NAME [--lease-id N] [--ttl S]

The recipe (concurrency.Mutex.Lock):
  1. grant a lease (the session; with --lease-id, that id) and keep it alive;
  2. in one txn: if create_revision(NAME/<lease hex>) == 0, put that key on the
     lease (else it is ours already), and read the lowest-create-revision key
     of NAME/ (the owner);
  3. while a key of NAME/ created before ours exists, wait for it to go (the
     library watches the delete of the last one before it; this client
     re-reads every 50 ms), then hold.
It prints `waiting KEY` once its key is written, and `KEY` (as `etcdctl lock`
does) once it holds the lock, then holds until stdin closes or SIGTERM:
then it deletes its key and revokes its lease (Unlock, then Session.Close).
"""

import base64
import json
import signal
import sys
import threading
import time
import urllib.request


def b64(s):
    return base64.b64encode(s.encode()).decode()


def prefix_end(s):
    b = bytearray(s.encode())
    b[-1] += 1
    return base64.b64encode(bytes(b)).decode()


class Gateway:
    def __init__(self, endpoint):
        self.endpoint = endpoint.rstrip("/")

    def call(self, path, body):
        req = urllib.request.Request(
            self.endpoint + "/v3/" + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=5) as resp:
            text = resp.read().decode()
        # A streaming endpoint (lease/keepalive) answers {"result": {...}}.
        out = json.loads(text.splitlines()[0])
        if "error" in out:
            raise RuntimeError(f"{path}: {out['error']}")
        return out.get("result", out)


def main():
    args = sys.argv[1:]
    endpoint, name = args[0], args[1]
    lease_id = int(args[args.index("--lease-id") + 1]) if "--lease-id" in args else 0
    ttl = int(args[args.index("--ttl") + 1]) if "--ttl" in args else 30
    gw = Gateway(endpoint)

    grant = {"TTL": ttl}
    if lease_id:
        grant["ID"] = str(lease_id)
    lease = int(gw.call("lease/grant", grant)["ID"])

    def keepalive():
        while True:
            time.sleep(max(ttl / 3, 1))
            try:
                gw.call("lease/keepalive", {"ID": str(lease)})
            except Exception:
                pass

    threading.Thread(target=keepalive, daemon=True).start()

    pfx = name + "/"
    key = pfx + format(lease, "x")
    owner = {
        "request_range": {
            "key": b64(pfx),
            "range_end": prefix_end(pfx),
            "sort_order": "ASCEND",
            "sort_target": "CREATE",
            "limit": 1,
        }
    }
    txn = gw.call(
        "kv/txn",
        {
            "compare": [{"key": b64(key), "target": "CREATE", "result": "EQUAL", "create_revision": 0}],
            "success": [{"request_put": {"key": b64(key), "value": "", "lease": str(lease)}}, owner],
            "failure": [{"request_range": {"key": b64(key)}}, owner],
        },
    )
    if txn.get("succeeded"):
        my_rev = int(txn["header"]["revision"])
    else:
        my_rev = int(txn["responses"][0]["response_range"]["kvs"][0]["create_revision"])
    print("waiting " + key, flush=True)

    # waitDeletes: every key of NAME/ created before ours must go.
    while True:
        older = gw.call(
            "kv/range",
            {
                "key": b64(pfx),
                "range_end": prefix_end(pfx),
                "max_create_revision": my_rev - 1,
                "keys_only": True,
            },
        )
        # Not `count`: etcd counts the range before the revision filter.
        if not older.get("kvs"):
            break
        time.sleep(0.05)
    print(key, flush=True)

    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
    done.wait()
    try:
        gw.call("kv/deleterange", {"key": b64(key)})
        gw.call("lease/revoke", {"ID": str(lease)})
    except Exception:
        pass


if __name__ == "__main__":
    main()
