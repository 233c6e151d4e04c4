"""Print READY, then GOT once SIGUSR1 arrives (NONE after 20 s)."""

import signal
import time

got = []
signal.signal(signal.SIGUSR1, lambda *a: got.append(1))
print("READY", flush=True)
end = time.time() + 20
while not got and time.time() < end:
    time.sleep(0.05)
print("GOT" if got else "NONE", flush=True)
