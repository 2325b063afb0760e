"""A pure-Python computation for test_exec.py, run through an interpreter
that a shim execs: 200 steps of a hash chain and a growing dict; after step
100 it prints READY and waits for ./stop (the harness checkpoints, kills and
restarts it meanwhile), then finishes and prints a digest of its state."""
import hashlib
import os
import time

h = hashlib.sha256(b"stasis")
table = {}
for step in range(200):
    h.update(h.digest() + step.to_bytes(4, "little"))
    table[step] = h.hexdigest()[:12]
    if step == 100:
        print("READY", flush=True)
        while not os.path.exists("stop"):
            time.sleep(0.01)
print("digest", h.hexdigest(), len(table), table[199])
print("PASS")
