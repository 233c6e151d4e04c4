"""The pods' figures, each a function over one job: a real coordinator (coordinator.py) and simulated member pods
(fleet.py). Times are seconds on ``time.monotonic`` (one clock for every process of the machine); every wait has
a timeout, and a figure not reached within it is None, with what was seen instead in the run's notes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.pods_scale.client import STOP_BASE
from bench.pods_scale.coordinator import Coordinator, Job, cpu_share, usage
from bench.pods_scale.fleet import Fleet
from dslaunch.channel.link import SILENT

POLL = 0.1
LOSS_WAIT = SILENT + 16.0  # a loss told to every pod, silent ones included
RESTART_WAIT = 60.0


class Abort(Exception):
    """The run cannot go on (the coordinator died, or grows threads past the guard)."""


@dataclass
class Sim:
    """One job's run: the coordinator now, the simulated pods, and what was measured."""

    job: Job
    folder: Path
    fleet: Fleet
    coordinator: Coordinator
    pods: list[int]  # the simulated pods' indexes (a fixed job's: their node ranks)
    max_threads: int
    spread: float = 0.0  # the pods start over this many seconds
    figures: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    attempt: int = 0  # coordinators restarted (their logs' names)
    gone: set[int] = field(default_factory=set)

    def guard(self) -> None:
        """Raise ``Abort`` when the coordinator died or its threads pass the guard (a thread-per-pod coordinator at
        16,384 pods would take the machine's pid space, which other work shares)."""
        used = usage(self.coordinator.pid)
        if used is None or self.coordinator.proc.poll() is not None:
            raise Abort(f"the coordinator exited ({self.coordinator.proc.poll()}): {self.coordinator.tail(600)}")
        self.figures["threads_peak"] = max(self.figures.get("threads_peak", 0), used.threads)
        if used.threads > self.max_threads:
            raise Abort(f"the coordinator has {used.threads} threads, past the guard of {self.max_threads}")

    def wait(self, done: Callable[[], bool], timeout: float, guard: bool = True) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if done():
                return True
            if time.monotonic() >= deadline:
                return False
            if guard:
                self.guard()
            time.sleep(POLL)

    def live(self) -> list[int]:
        return [p for p in self.pods if p not in self.gone]


def start_members(sim: Sim) -> None:
    """Every simulated pod starts its join: at once (a synchronized start), or spread over ``sim.spread`` s."""
    sim.fleet.call("start", spread=sim.spread)


def _started(sim: Sim, attempt: int, pods: list[int]) -> tuple[int, float | None]:
    """How many of ``pods`` have started ``attempt``, and when the last of them did."""
    got = sim.fleet.query("started", attempt)
    times = [got[p] for p in pods if got.get(p) is not None]
    return len(times), max(times) if times else None


def _hopeless(sim: Sim) -> bool:
    """A fixed job's attempt cannot start: a pod gave up, and every other has joined or given up too."""
    states = sim.fleet.summary()["states"]
    return bool(states.get("done", 0) > 0 and states.get("joining", 0) == 0)


def joined(sim: Sim, wait: float) -> bool:
    """All joined: from the last pod's first try to the attempt started on every pod; connection tries."""
    pods = sim.live()
    ok = sim.wait(lambda: _started(sim, 0, pods)[0] == len(pods) or _hopeless(sim), wait)
    count, last = _started(sim, 0, pods)
    first = sim.fleet.query("first_try")
    summary = sim.fleet.summary()
    sim.figures.update(
        joined=count,
        waiting=summary["states"].get("joined", 0),
        gave_up=sum(summary["gave_up"].values()),
        pods=len(pods) + 1,
        tries=summary["tries"],
        tries_per_pod=round(summary["tries"] / len(pods), 2),
        joined_s=round(last - max(first[p] for p in pods), 3) if count == len(pods) and last else None,
    )
    if count < len(pods):
        sim.notes.append(f"joined: {count} of {len(pods)} within {wait:g} s ({'all settled' if ok else 'timed out'})")
        gave_up, ends = dict(summary["gave_up"].most_common(4)), dict(summary["ends"].most_common(6))
        sim.notes.append(f"pods gave up: {gave_up}; links ended: {ends}")
        sim.notes.append(f"coordinator: {sim.coordinator.tail(400)!r}")
    return count == len(pods)


def quiet(sim: Sim, settle: float, window: float) -> bool:
    """The coordinator's CPU over ``window`` once the attempt runs (the pods heartbeat, nothing else happens), its
    threads and memory; the simulator's own CPU in the same window."""
    time.sleep(settle)
    sim.guard()
    pids = [sim.coordinator.pid, *sim.fleet.pids]
    lost_before = _losses(sim)
    before = [usage(p) for p in pids]
    time.sleep(window)
    after = [usage(p) for p in pids]
    sim.figures["quiet_losses"] = _losses(sim) - lost_before  # none should be: nothing was lost
    share = [(a.cpu - b.cpu) / window if a and b else 0.0 for a, b in zip(after, before)]
    end = after[0]
    sim.figures.update(
        quiet_cpu_pct=round(100 * share[0], 1),
        sim_cpu_pct=round(100 * sum(share[1:]), 1),
        threads=end.threads if end else None,
        rss_mb=round(end.rss_mb, 1) if end else None,
    )
    return True


def running(sim: Sim) -> int | None:
    """The attempt every simulated pod runs now, or None (some pod is joining, waiting, or in another attempt)."""
    got = sim.fleet.query("latest")
    now = {got[p][0] for p in sim.live() if got.get(p) is not None and got[p][2]}
    alive = sum(1 for p in sim.live() if got.get(p) is not None and got[p][2])
    return next(iter(now)) if len(now) == 1 and alive == len(sim.live()) else None


def _losses(sim: Sim) -> int:
    """Losses so far: pods heard lost (by any pod) and links to the coordinator that ended without its word."""
    summary = sim.fleet.summary()
    return int(sum(summary["lost_heard"].values()) + summary["coordinator_lost"])


def _lose(sim: Sim, how: str, name: str, wait: float) -> tuple[float, float] | None:
    """Lose one pod (``how``: "drop" closes its connection, "silence" stops it sending): the time until every other
    pod has heard it lost (the coordinator's ``NodeLost`` relay); then the pod is recreated. None: the job was not
    running on every pod to begin with (noted)."""
    attempt = running(sim)
    if attempt is None:
        sim.notes.append(f"{name}: the job no longer ran on every pod before it (a pod taken as lost meanwhile)")
        return None
    victim = sim.live()[len(sim.live()) // (2 if how == "drop" else 3)]
    node = sim.fleet.query("node")[victim]
    others = [p for p in sim.live() if p != victim]
    cpu0 = _cpu(sim)
    t0 = time.monotonic()
    t0 = sim.fleet.act(how, [victim]) or t0  # from when its worker did it (a busy worker is behind the ask)

    def told() -> list[float]:
        got = sim.fleet.query("lost", (attempt, node))
        return [got[p] for p in others if got.get(p) is not None]

    sim.wait(lambda: len(told()) == len(others), wait)
    heard = told()
    sim.figures[f"{name}_told"] = len(heard)
    sim.figures[f"{name}_told_s"] = round(max(heard) - t0, 3) if len(heard) == len(others) else None
    if len(heard) < len(others):
        sim.notes.append(f"{name}: {len(heard)} of {len(others)} pods told within {wait:g} s")
    sim.fleet.act("revive", [victim])
    return t0, cpu0


def next_attempt(sim: Sim, t0: float, name: str, wait: float = RESTART_WAIT, cpu0: float | None = None) -> bool:
    """The job runs again on every pod (each runs one attempt, started after ``t0``): seconds from ``t0``; with
    ``cpu0`` (the coordinator's CPU seconds at ``t0``), the coordinator's CPU seconds meanwhile."""
    pods = sim.live()

    def since() -> tuple[int, float | None]:
        got = sim.fleet.query("latest")
        fresh = [got[p] for p in pods if got.get(p) is not None and got[p][2] and got[p][1] >= t0]
        attempts = {a for a, _t, _running in fresh}
        return (len(fresh), max(t for _a, t, _r in fresh)) if len(attempts) == 1 else (0, None)

    sim.wait(lambda: since()[0] == len(pods), wait)
    count, last = since()
    ok = count == len(pods)
    sim.figures[f"{name}_s"] = round(last - t0, 3) if ok and last else None
    used = usage(sim.coordinator.pid)
    if cpu0 is not None and used is not None:
        sim.figures[f"{name}_cpu_s"] = round(used.cpu - cpu0, 2)
    if not ok:
        summary = sim.fleet.summary()
        sim.notes.append(f"{name}: the job did not run again on every pod within {wait:g} s")
        sim.notes.append(f"pods gave up: {dict(summary['gave_up'].most_common(4))}; states: {dict(summary['states'])}")
    return ok


def _cpu(sim: Sim) -> float:
    used = usage(sim.coordinator.pid)
    return used.cpu if used is not None else 0.0


def dropped(sim: Sim, wait: float = RESTART_WAIT) -> bool:
    """A deleted pod (its connection closes): told to every other pod; the job restarted on every pod."""
    lost = _lose(sim, "drop", "drop", LOSS_WAIT)
    return lost is not None and next_attempt(sim, lost[0], "drop_restart", wait, cpu0=lost[1])


def silent(sim: Sim, wait: float = RESTART_WAIT) -> bool:
    """A pod that stops sending, its connection open (powered off, cut off): noticed, told to every other pod."""
    lost = _lose(sim, "silence", "silent", LOSS_WAIT)
    return lost is not None and next_attempt(sim, lost[0], "silent_restart", wait, cpu0=lost[1])


def coordinator_restarted(sim: Sim, wait: float = RESTART_WAIT) -> bool:
    """The coordinator's pod deleted and recreated at once: every member pod joins the new one (a lost coordinator
    is a failed attempt: a member joins again while --max-restarts allows); seconds from the kill to the next
    attempt on every pod, and from the new coordinator's listening."""
    if running(sim) is None:
        sim.notes.append("restart: the job no longer ran on every pod before it (a pod taken as lost meanwhile)")
        return False
    t0 = time.monotonic()
    sim.coordinator.kill()
    sim.attempt += 1
    sim.coordinator = Coordinator(sim.job, sim.folder, f"coordinator-restarted{sim.attempt}")
    listening = sim.coordinator.wait_listening(30)
    t_listen = time.monotonic()
    ok = next_attempt(sim, t0, "coordinator_restart", wait, cpu0=0.0)  # the new coordinator's CPU from its start
    if ok and listening:
        got = sim.fleet.query("latest")
        sim.figures["coordinator_restart_from_listen_s"] = round(max(got[p][1] for p in sim.live()) - t_listen, 3)
    return ok


def requested_stop(sim: Sim, settle: float) -> bool:
    """SIGTERM to the coordinator: the time until every pod has the job's stop step (``stop_at``), and whether it is
    the same on every pod (the largest proposal); False: the job is over. ``settle`` s after the attempt started
    first: between its wait for the pods and its supervision of the attempt the coordinator does not catch SIGTERM
    (it dies of it)."""
    time.sleep(settle)
    pods = sim.live()
    t0 = time.monotonic()
    os.kill(sim.coordinator.pid, signal.SIGTERM)

    def steps() -> dict[int, tuple[int, float]]:
        got = sim.fleet.query("stop_at")
        return {p: got[p] for p in pods if got.get(p) is not None}

    sim.wait(lambda: len(steps()) == len(pods), 30, guard=False)
    have = steps()
    expected = STOP_BASE + max(p % 7 for p in pods)
    agreed = {step for step, _t in have.values()}
    sim.figures["stop_agreed"] = len(have)
    sim.figures["stop_step_ok"] = agreed == {expected}
    sim.figures["stop_agreed_s"] = round(max(t for _s, t in have.values()) - t0, 3) if len(have) == len(pods) else None
    if len(have) < len(pods) or agreed != {expected}:
        sim.notes.append(
            f"stop: {len(have)} of {len(pods)} pods got a step within 30 s: {sorted(agreed)} ({expected} expected)"
        )
    try:
        code = sim.coordinator.proc.wait(30)
        sim.figures["coordinator_exit"] = code
        sim.figures["coordinator_exit_s"] = round(time.monotonic() - t0, 3)
    except subprocess.TimeoutExpired:
        sim.notes.append("stop: the coordinator did not exit within 30 s")
    return False


def standby(sim: Sim, wait: float) -> None:
    """An elastic job (``--nnodes N``, c10d, no node rank) with one pod more than it runs: lose a running pod; the
    time until the next attempt runs on every pod, the standby among them."""
    pods = sim.live()
    ok = sim.wait(lambda: _started(sim, 0, pods)[0] == len(pods) - 1 and _standbys(sim, pods) == 1, wait)
    count, _last = _started(sim, 0, pods)
    sim.figures["standby_joined"] = count
    if not ok:
        sim.notes.append(
            f"standby: {count} of {len(pods) - 1} started, {_standbys(sim, pods)} standing by, within {wait:g} s"
        )
        return
    started = sim.fleet.query("started", 0)
    victim = next(p for p in pods if started.get(p) is not None)
    t0 = time.monotonic()
    t0 = sim.fleet.act("drop", [victim]) or t0
    sim.gone.add(victim)
    next_attempt(sim, t0, "standby")


def _standbys(sim: Sim, pods: list[int]) -> int:
    got = sim.fleet.query("standby", 0)
    return sum(1 for p in pods if got.get(p) is not None)


def soak(sim: Sim, seconds: float, busy: int = 2) -> None:
    """``seconds`` of a running job under ``busy`` busy loops: pods taken as lost (a NodeLost any pod heard), pods
    that took the coordinator as lost, and the coordinator's CPU over the whole time."""
    loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        share, after = cpu_share([sim.coordinator.pid], seconds)
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    summary = sim.fleet.summary()
    sim.figures.update(
        soak_s=seconds,
        soak_lost=sum(summary["lost_heard"].values()),
        soak_lost_nodes=len(summary["lost_heard"]),
        soak_coordinator_lost=summary["coordinator_lost"],
        soak_cpu_pct=round(100 * share, 1),
        soak_threads=after[0].threads if after[0] else None,
    )


def _ran_again(sim: Sim, pods: list[int], attempt: int) -> list[float]:
    got = sim.fleet.query("started", attempt)
    return [got[p] for p in pods if got.get(p) is not None]


def _swap(sim: Sim, pods: list[int], attempt: int, wait: float) -> float | str:
    """Lose a pod running ``attempt``; once the next runs on every other pod, recreate it as the standby: the
    seconds until the next attempt ran everywhere, or what happened instead."""
    started = sim.fleet.query("started", attempt)
    victim = next(p for p in pods if started.get(p) is not None)
    others = [p for p in pods if p != victim]
    t0 = sim.fleet.act("drop", [victim]) or time.monotonic()
    if not sim.wait(lambda: len(_ran_again(sim, others, attempt + 1)) == len(others), wait):
        return f"{len(_ran_again(sim, others, attempt + 1))} of {len(others)} ran again within {wait:g} s"
    took = max(_ran_again(sim, others, attempt + 1)) - t0
    sim.fleet.act("revive", [victim])
    if not sim.wait(lambda: sim.fleet.query("standing_by").get(victim) is not None, wait):
        return f"the recreated pod did not stand by within {wait:g} s"
    return took


def churn(sim: Sim, cycles: int, wait: float) -> None:
    """A long job's churn in minutes: an elastic job with one standby loses a running pod ``cycles`` times; each
    time the next attempt runs on every pod (the standby among them) and the lost pod, recreated, stands by for the
    next. How long each swap took, and the coordinator's memory, threads and open files after each: flat, or a
    leak by the attempt."""
    pods = sim.live()
    if not sim.wait(lambda: _started(sim, 0, pods)[0] == len(pods) - 1 and _standbys(sim, pods) == 1, wait):
        sim.notes.append(f"churn: the first attempt did not run with one standby within {wait:g} s")
        return
    swaps: list[float] = []
    tries: list[float] = []  # connections a pod made for each swap's attempt
    after: list[tuple[float, int, int]] = []  # RSS (MB), threads, open files
    for cycle in range(cycles):
        took = _swap(sim, pods, cycle, wait)
        if isinstance(took, str):
            sim.notes.append(f"churn: swap {cycle + 1}: {took}")
            break
        swaps.append(took)
        tries.append(round(sim.fleet.summary()["tries"] / len(pods), 3))
        used = usage(sim.coordinator.pid)
        if used is None:
            raise Abort(f"the coordinator exited: {sim.coordinator.tail(600)}")
        after.append((used.rss_mb, used.threads, len(os.listdir(f"/proc/{sim.coordinator.pid}/fd"))))
    sim.figures.update(
        churn_swaps=len(swaps),
        churn_swap_s=round(sorted(swaps)[len(swaps) // 2], 3) if swaps else None,
        churn_swap_max_s=round(max(swaps), 3) if swaps else None,
        churn_each_s=[round(t, 3) for t in swaps],
        churn_tries=sorted(tries)[len(tries) // 2] if tries else None,
        churn_tries_max=max(tries) if tries else None,
        churn_tries_each=tries,
        churn_first=after[0] if after else None,
        churn_last=after[-1] if after else None,
    )
