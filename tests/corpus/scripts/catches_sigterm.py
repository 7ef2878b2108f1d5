"""A training loop whose framework catches SIGTERM and returns normally, as PyTorch Lightning
does: the handler asks the loop to stop, the loop ends early, the script exits 0. No
TensorFlow; the "training" is a counter.

usage: catches_sigterm.py STEPS
"""

import signal
import sys
import time

stop_requested = False


def on_sigterm(signum, frame):
    global stop_requested
    print("received SIGTERM: stopping training early", flush=True)
    stop_requested = True


signal.signal(signal.SIGTERM, on_sigterm)

steps = int(sys.argv[1])
for step in range(steps):
    if stop_requested:
        break
    time.sleep(0.01)
    if step % 10 == 0:
        print(f"step {step}", flush=True)
print(f"trained {step + 1} of {steps} steps", flush=True)
