"""A script that knows nothing of Tiresias: it runs until it is killed."""

import time

while True:
    time.sleep(1)
