"""Restarts: run the plan, and while an attempt fails and restarts are left, wait and run it again.

Every runner tears the whole job down on every node before it returns, so an
attempt is always a fresh start of every rank with the same plan (same run id,
a new attempt number in ``TORCHELASTIC_RESTART_COUNT``). A signal to dslaunch
ends the job, whether it comes during an attempt or during the delay.

A plan with candidate hosts (``--nnodes MIN:MAX``, spares) runs each attempt on the hosts
:class:`HostPool` chooses: probed first, the ones an earlier attempt blamed left out (docs/elastic.md).
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from dslaunch import wire
from dslaunch.job import elastic
from dslaunch.job.restart_policy import may_restart
from dslaunch.job.result import START_FAILED, JobResult, restart_cause, stopped
from dslaunch.mesh import MeshConfigError
from dslaunch.plan import LaunchPlan

if TYPE_CHECKING:
    from dslaunch.job.protocols import Runner
    from dslaunch.observe.session import Observer

Probe = Callable[[LaunchPlan, list[str]], dict[str, str]]  # (plan, hosts) -> the hosts that failed, with why
Address = Callable[[LaunchPlan, str], str]  # (plan, host) -> the address its ranks reach it at


class HostPool:
    """Which hosts each attempt of an elastic plan runs on: the hosts left out so far, and the probes.

    The transport's side comes in as two functions (``runners.host_pool`` passes the runner's): ``probe``, which
    checks hosts as ``--preflight`` does, and ``address``, a host's address for ``MASTER_ADDR``."""

    def __init__(self, plan: LaunchPlan, probe: Probe | None = None, address: Address | None = None) -> None:
        self.plan = plan
        self.probe = probe
        self.address = address
        self.quarantine: dict[str, str] = {}  # host -> why, in the order blamed
        self.previous: tuple[str, ...] = ()  # the hosts of the last attempt started
        self.announced: set[str] = set()

    def blame(self, blamed: tuple[tuple[str, str], ...]) -> None:
        for host, why in blamed:
            self.quarantine.setdefault(host, why)

    def next_plan(self, count: int) -> LaunchPlan | JobResult:
        """Attempt ``count``'s plan, or (printed, never retried) why it cannot start."""
        plan = self.plan
        if not plan.elastic.candidates:
            return plan.attempt(count)
        self._probe_new(count)
        hosts = elastic.choose_hosts(plan.elastic, self.quarantine)
        news = [h for h in self.quarantine if h not in self.announced]
        self.announced.update(news)
        if not elastic.enough(plan.elastic, hosts):
            _say(elastic.shortfall(plan.elastic, self.quarantine, hosts))
            return stopped(START_FAILED, f"not started: {len(hosts)} usable host(s), {plan.elastic.nnodes_min} needed")
        if news:
            _say(elastic.left_out_line(self.quarantine, news))
        try:
            laid = elastic.layout(plan, hosts, self._master_addr(hosts))
        except MeshConfigError as exc:
            _say(f"dslaunch: cannot start: {exc.message}")
            return stopped(START_FAILED, "not started: the mesh does not fit the hosts left")
        if count and hosts != self.previous:
            _say(f"dslaunch: attempt {count + 1} runs on {elastic.named(hosts)} ({laid.world_size} ranks)")
        self.previous = hosts
        return laid.attempt(count)

    def _probe_new(self, count: int) -> None:
        """Attempt 0 probes every candidate; a later one each host it takes that the last attempt did not use."""
        if self.probe is None:
            raise ValueError("an elastic plan needs a probe for its hosts (runners.host_pool)")
        probed: set[str] = set()
        while True:
            if count == 0:
                wanted = [c.host for c in self.plan.elastic.candidates if c.host not in self.quarantine]
            else:
                wanted = [h for h in elastic.choose_hosts(self.plan.elastic, self.quarantine) if h not in self.previous]
            wanted = [h for h in wanted if h not in probed]
            if not wanted:
                return
            probed.update(wanted)
            for host, why in self.probe(self.plan, wanted).items():
                self.quarantine.setdefault(host, why)

    def _master_addr(self, hosts: tuple[str, ...]) -> str:
        plan = self.plan
        if plan.elastic.fixed_addr or hosts[0] == plan.nodes[0].host:
            return plan.master_addr
        if self.address is None:
            raise ValueError("an elastic plan needs its hosts' addresses (runners.host_pool)")
        return self.address(plan, hosts[0])


def run_attempts(
    runner: Runner, plan: LaunchPlan, pool: HostPool | None = None, observer: Observer | None = None
) -> int:
    """Run ``plan`` while ``job/restart_policy.may_restart`` allows; the exit code is the last attempt's. The
    runner's ``close()`` ends what it kept for the whole job (job agents), once the job is over. ``observer``: the
    job's (docs/observability.md), handed to the runner for each attempt and told how each ended."""
    try:
        return _run_attempts(runner, plan, pool, observer)
    finally:
        runner.close()


def _run_attempts(runner: Runner, plan: LaunchPlan, pool: HostPool | None, observer: Observer | None) -> int:
    pool = pool or HostPool(plan)
    results: list[JobResult] = []
    used: list[tuple[str, ...]] = []
    limit = plan.restarts.max_restarts
    while True:
        count = len(results)
        attempt = pool.next_plan(count)
        hosts: tuple[str, ...]
        if isinstance(attempt, JobResult):
            result, hosts = attempt, ()
        else:
            result, hosts = runner.run(attempt, observer), tuple(n.host for n in attempt.nodes)
            pool.blame(result.blamed)
        results.append(result)
        used.append(hosts)
        verdict = may_restart(results, plan.restarts, plan.no_restart_on)
        if observer is not None:
            cause = result.restart_cause or restart_cause(
                result.code, lost=bool(result.blamed), ranks=bool(result.failures)
            )
            observer.attempt_ended(result.code, cause, verdict.restart)
        if not verdict.restart:
            if verdict.say:
                _say(f"dslaunch: not restarting: {verdict.why}")
            break
        with stop_signals_caught(plan.stop_signum) as caught:  # before the notice: a Ctrl-C right after it is ours
            _say(
                f"dslaunch: attempt {_number(result, count)} of {limit + 1} failed "
                f"({result.cause or f'exit {result.code}'}); "
                f"restarting every rank in {plan.restarts.delay:g} s"
            )
            signum = _sleep_unless_signalled(plan.restarts.delay, caught)
        if signum is not None:
            _say(f"dslaunch: received {signal.Signals(signum).name} while waiting to restart; not restarting")
            return 128 + signum if plan.stop_exit_code is None else plan.stop_exit_code
    if len(results) > 1:
        _say(attempts_summary(results, limit, used if plan.elastic.candidates else None))
    return results[-1].code


def attempts_summary(results: list[JobResult], limit: int, hosts: list[tuple[str, ...]] | None = None) -> str:
    """One line per attempt, with its cause (and, for an elastic plan, its hosts): what the user reads after a
    job that was restarted."""
    first = _number(results[0], 0)
    ran = f"{len(results)} times" if first == 1 else f"attempts {first} to {_number(results[-1], len(results) - 1)}"
    lines = [
        f"dslaunch: the job ran {ran} here (--max-restarts {limit}):"
        if first != 1
        else f"dslaunch: the job ran {ran} (--max-restarts {limit}):"
    ]
    for index, result in enumerate(results):
        number = _number(result, index)
        what = "succeeded" if not result.failed else result.cause or "failed"
        where = "" if hosts is None else f" on {elastic.named(hosts[index])}" if hosts[index] else " (not started)"
        lines.append(f"  attempt {number}{where}: exit {result.code}: {what}")
    return "\n".join(lines)


def _number(result: JobResult, count: int) -> int:
    """The attempt's number for people (1 the first): the job's, where the runner knows it, else this launcher's."""
    return (count if result.attempt is None else result.attempt) + 1


@contextmanager
def stop_signals_caught(also: int | None = None) -> Iterator[list[int]]:
    """SIGINT/SIGTERM/SIGHUP (and ``also``: --stop-on-signal's) are recorded (in the list given) instead of acted
    on, while in the block."""
    caught: list[int] = []
    stops = (*wire.STOP_SIGNALS, *((also,) if also is not None else ()))
    previous = {s: signal.signal(s, lambda signum, _f: caught.append(signum)) for s in stops}
    try:
        yield caught
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _sleep_unless_signalled(seconds: float, caught: list[int]) -> int | None:
    """Wait ``seconds``; a stop signal (recorded in ``caught``) ends the wait at once and is returned."""
    deadline = time.monotonic() + seconds
    while not caught and time.monotonic() < deadline:
        time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
    return caught[0] if caught else None


def _say(text: str) -> None:
    from dslaunch.logs import file_record
    from dslaunch.output.sink import STALL, write_within

    file_record("launcher", "restart", text=text)
    sys.stdout.flush()
    write_within(2, (text + "\n").encode(), STALL)
