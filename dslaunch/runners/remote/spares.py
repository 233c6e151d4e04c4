"""Spare hosts standing by: a spare (``--num-nodes N`` with a longer hostfile, ``--nnodes MIN:MAX``) gets its
job agent when the job starts, and with ``--preload`` its zygote imports at once (``wire.job_standby``), so
promoting it costs a fork and a rendezvous. While it waits it is checked every ``--spare-check-interval``
seconds as ``--preflight`` checks a host (over the connection it already has, on ssh); a spare that fails is
dropped with one line, and the next attempt leaves it out (docs/elastic.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from dslaunch import wire
from dslaunch.job.loop import supervise_and_report
from dslaunch.job.result import JobResult
from dslaunch.output.lanes import ErrLane
from dslaunch.plan import LaunchPlan
from dslaunch.runners.remote.job_agents import Attempt, JobAgent, JobAgents

if TYPE_CHECKING:
    from dslaunch.observe.session import Observer

Probe = Callable[[LaunchPlan, list[str]], dict[str, str]]  # (plan, hosts) -> the hosts that failed, with why
StartAgents = Callable[[list[str]], dict[str, JobAgent]]  # hosts -> the agents started (a host left out failed)


class Spares:
    """The job's spare hosts standing by, their last good check, and the ones found unfit."""

    def __init__(self, agents: JobAgents, probe: Probe, err: ErrLane) -> None:
        self.err = err
        self.agents = agents
        self.probe = probe
        self.waiting: set[str] = set()  # spares with a job agent, in no attempt
        self.unfit: dict[str, str] = {}  # spare -> why it was dropped
        self.checked: dict[str, float] = {}  # host -> when it last passed a check (monotonic)
        self.lock = threading.Lock()
        self._started: threading.Thread | None = None
        self._done = threading.Event()
        self._watch: threading.Thread | None = None

    def stand_by(self, plan: LaunchPlan, start_agents: StartAgents) -> None:
        """In the background: an agent on each candidate host ``plan`` does not use, told to get ready."""
        in_use = {node.host for node in plan.nodes}
        with self.lock:
            hosts = [
                c.host
                for c in plan.elastic.candidates
                if c.host not in in_use and c.host not in self.unfit and c.host not in self.agents.by_host
            ]
        if not hosts:
            return
        self.join()
        self._started = threading.Thread(target=self._start, args=(plan, hosts, start_agents), daemon=True)
        self._started.start()

    def _start(self, plan: LaunchPlan, hosts: list[str], start_agents: StartAgents) -> None:
        now = time.monotonic()
        for host, agent in start_agents(hosts).items():  # a host that cannot be reached is the next probe's to judge
            agent.send(wire.job_standby(plan))
            with self.lock:
                self.agents.by_host[host] = agent
                self.waiting.add(host)
                self.checked[host] = now  # probed before attempt 0 (job/attempts.HostPool)
        if self._watch is None:
            self._watch = threading.Thread(target=self._check_loop, args=(plan,), name="spares", daemon=True)
            self._watch.start()

    def join(self) -> None:
        """Until the spares being started are up (before an attempt picks its hosts)."""
        if self._started is not None:
            self._started.join()
            self._started = None

    def promoted(self, hosts: list[str]) -> None:
        with self.lock:
            self.waiting.difference_update(hosts)

    def fresh(self, host: str, interval: float) -> bool:
        """Whether ``host`` is a spare that passed a check less than ``interval`` ago: no need to probe it again."""
        with self.lock:
            return host in self.waiting and time.monotonic() - self.checked.get(host, -interval) < interval

    def to_probe(self, hosts: list[str], interval: float) -> tuple[dict[str, str], list[str]]:
        """Of ``hosts`` before a probe: the spares found unfit (with why), and the hosts to probe (not a spare that
        passed a check less than ``interval`` ago)."""
        with self.lock:
            unfit = {h: self.unfit[h] for h in hosts if h in self.unfit}
        return unfit, [h for h in hosts if h not in unfit and not self.fresh(h, interval)]

    def supervise(self, plan: LaunchPlan, attempts: list[Attempt], observer: Observer | None) -> JobResult:
        """Run one attempt to its end; then drop the agents that did not reach it, and keep the hosts it blamed out
        of the spares (the next attempts leave them out too: HostPool)."""
        result = supervise_and_report(plan, attempts, self.err, observer)
        self.agents.after(attempts)
        with self.lock:
            self.unfit.update(result.blamed)
        return result

    def close(self) -> None:
        self._done.set()
        self.join()

    def end_job(self) -> None:
        """The job is over: no more checks, and every agent ends (the spares' and the attempts'), with its zygote."""
        self.close()
        self.agents.close()

    def _check_loop(self, plan: LaunchPlan) -> None:
        interval = plan.remote.spare_check
        while not self._done.wait(interval):
            with self.lock:
                hosts = sorted(self.waiting)
            if not hosts:
                continue
            with self.lock:
                gone = {h: "its agent is gone" for h in hosts if (a := self.agents.by_host.get(h)) and not a.usable()}
            failed = {**self.probe(plan, [h for h in hosts if h not in gone]), **gone}
            now = time.monotonic()
            for host in hosts:
                why = failed.get(host)
                if why is None:
                    with self.lock:
                        self.checked[host] = now
                    continue
                with self.lock:
                    if host not in self.waiting:
                        continue  # promoted meanwhile: the attempt judges it
                    self.waiting.discard(host)
                    self.unfit[host] = why
                    self.agents.drop(host)
                self.err.write(f"dslaunch: spare host {host} failed its check and is dropped: {why}\n".encode())


def run_each(hosts: list[str], run: Callable[[str], tuple[int | None, str, str]], fanout: int) -> list[Any]:
    """``run(host)`` for every host, at most ``fanout`` at a time, in order."""
    with ThreadPoolExecutor(max_workers=max(1, min(fanout, len(hosts)))) as pool:
        return list(pool.map(run, hosts))
