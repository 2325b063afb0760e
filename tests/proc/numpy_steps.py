"""A numpy computation for test_python.py: 100 steps of a small nonlinear
iteration (BLAS matrix products) with state in arrays; after step 50 it prints
READY and waits for ./stop (the harness checkpoints, kills and restarts it
meanwhile), then finishes and prints a digest of the result."""
import hashlib
import os
import time

import numpy as np

rng = np.random.default_rng(2026)
a = rng.standard_normal((300, 300))
x = np.zeros((300, 300))
for step in range(100):
    x = np.tanh(x @ a / 300.0 + a * (step % 7))
    if step == 50:
        print("READY", flush=True)
        while not os.path.exists("stop"):
            time.sleep(0.01)
print("digest", hashlib.sha256(x.tobytes()).hexdigest())
print("PASS")
