"""The simulator checked against the real client: ``pods - 1`` threads of one process each run the pods' own join
(``pods/member.join``) at once against a real coordinator, and what became of each is counted, to set beside the
simulated pods' (``--scenarios realjoin``). Threads share one GIL, so the hellos leave a little less at once than
from the simulator's loops; the outcome (who joined, who gave up, and why) is the figure, not the time.

    python -m bench.pods_scale.real_join PODS JOIN_WAIT   (prints one JSON object)
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench.pods_scale.coordinator import Coordinator, Job, free_port_pair


def main(pods: int, wait: float) -> dict[str, object]:
    from dslaunch.pods.member import Joined, join

    secret = "bench-pods-scale-secret"
    job = Job(pods, 8, free_port_pair(), f"realjoin{uuid.uuid4().hex[:8]}", secret, join_timeout=wait)
    shape = job.shape()
    folder = Path(tempfile.mkdtemp(prefix="bench-real-join-"))
    coordinator = Coordinator(job, folder)
    outcomes: dict[int, str] = {}
    links = []
    try:
        if not coordinator.wait_listening(60):
            return {"aborted": f"the coordinator did not listen: {coordinator.tail(400)}"}
        barrier = threading.Barrier(pods - 1)

        def one(n: int) -> None:
            barrier.wait()
            me = (n, f"job-worker-{n}", -1)
            got = join(
                job.address, secret.encode(), job.run_id, me, deadline=time.monotonic() + wait, stopped=[], shape=shape
            )
            outcomes[n] = "started" if isinstance(got, Joined) else str(got)[:100]
            if isinstance(got, Joined):
                links.append(got.link)

        threads = [threading.Thread(target=one, args=(n,), daemon=True) for n in range(1, pods)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(wait + 10)
    finally:
        for link in links:
            link.close()
        coordinator.kill()
        shutil.rmtree(folder, ignore_errors=True)
    counted = Counter(outcomes.values())
    return {"real_started": counted.pop("started", 0), "real_outcomes": dict(counted.most_common(4))}


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]), float(sys.argv[2]))))
