"""Linear regression by gradient descent in plain NumPy, checkpointing itself every 10
steps (``np.savez`` to a temporary file, then a rename) and resuming from its last save.
Its one Tiresias line reports the step at the top of each iteration.

usage: numpy_own_checkpoint.py CHECKPOINT STEPS
"""

import os
import sys
import time

import numpy as np

import tiresias

path, steps = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(0)
x = rng.normal(size=(256, 4))
y = x @ np.array([1.0, -2.0, 0.5, 3.0])
w, start = np.zeros(4), 0
if os.path.exists(path):
    saved = np.load(path)
    w, start = saved["w"], int(saved["step"])
    print(f"resumed from my checkpoint at step {start}", flush=True)

for step in range(start, steps):
    tiresias.report(step=step)
    w -= 0.01 * 2 * x.T @ (x @ w - y) / len(x)
    time.sleep(0.05)  # the rest of a real step
    if (step + 1) % 10 == 0:
        np.savez(f"{path}.tmp.npz", w=w, step=step + 1)
        os.replace(f"{path}.tmp.npz", path)
    print(f"step {step + 1} loss {float(np.mean((x @ w - y) ** 2)):.6f}", flush=True)
