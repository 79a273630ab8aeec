"""One simulated run: build the cluster, run the workload under faults, check after every event.

`run_seed(seed, options)` returns a `RunResult`; the same seed and options (and schedule, when one is
given) give the same trace hash. The run has three phases on virtual time: start (controller, brokers,
topics, every partition led), load (producers, consumers and faults for `duration_s`), and settle (faults
undone, dead brokers restarted, then up to 30 s for every replica to rejoin the ISR and catch up, with
the checks still running). The first violation ends the run. Liveness is checked too: while the load
runs, or while the cluster settles short of converging, something must move (`no_progress`), and a run
whose replicas have not converged when the settle ends fails (`not_converged`), however much moved. An
exception that is no check failure ends the run as `simulator_error`, so a sweep goes on.
"""

from __future__ import annotations

import asyncio
import logging
import random
import shutil
import tempfile
import time as wall
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from protocol.messages import CreatableTopic, CreateTopicsRequest, TopicPartition
from server_common.poll import wait_until
from sim.checker import Checker, Violation
from sim.cluster import SimCluster, SimOptions
from sim.faults import Fault, FaultInjector, generate
from sim.loop import VirtualTimeLoop
from sim.timeline import Recorder
from sim.trace import Trace
from sim.workload import Consumer, Producer, WriteHistory

ADMIN_ID = 999
CHECK_INTERVAL_S = 0.05
SETTLE_MAX_S = 30.0
# Liveness: while the load runs (or the cluster settles, not yet converged) some replica's LEO or HW, or some
# partition's leader, epoch or ISR, must move at least this often (virtual seconds). Faults last at most 6 s
# and a broker's session times out in 6 s, so the longest stall in a healthy run is far shorter.
NO_PROGRESS_S = 20.0
# Not a check of the brokers: the run itself broke (a scenario stuck, a deadlock, a bug in the simulator).
SIMULATOR_ERROR = "simulator_error"


def _error(exc: BaseException) -> Violation:
    """An exception that ended a run, with where it was raised, as that run's failure."""
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else ""
    return Violation(SIMULATOR_ERROR, f"{type(exc).__name__}: {exc}{where}")


@dataclass
class RunResult:
    seed: int
    trace_hash: str
    events: int
    virtual_s: float
    wall_s: float
    schedule: list[Fault]
    violation: Violation | None = None  # a check that failed, or SIMULATOR_ERROR
    timeline: list[dict[str, Any]] = field(default_factory=list)
    replicas: list[dict[str, Any]] = field(default_factory=list)
    faults_injected: dict[str, int] = field(default_factory=dict)
    acked: int = 0
    failed: int = 0
    indeterminate: int = 0
    acks1_lost: int = 0
    excused_losses: int = 0
    consumed: int = 0
    converged: bool = False
    messages: int = 0
    requests: dict[str, int] = field(default_factory=dict)  # sent over the network, by request type
    longest_stall_s: float = 0.0  # the longest time nothing moved while the liveness check watched
    trace_lines: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.violation is None

    def summary(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "ok": self.ok,
            "check": self.violation.check if self.violation else None,
            "message": self.violation.message if self.violation else None,
            "trace_hash": self.trace_hash,
            "events": self.events,
            "virtual_s": round(self.virtual_s, 3),
            "wall_s": round(self.wall_s, 3),
            "faults": self.faults_injected,
            "acked": self.acked,
            "failed": self.failed,
            "indeterminate": self.indeterminate,
            "acks1_lost": self.acks1_lost,
            "excused_losses": self.excused_losses,
            "consumed": self.consumed,
            "converged": self.converged,
            "longest_stall_s": round(self.longest_stall_s, 3),
        }


class _Progress:
    """When the cluster last moved: any replica's LEO or HW, any partition's leader, epoch or ISR."""

    def __init__(self, cluster: SimCluster) -> None:
        self.cluster = cluster
        self.since: float | None = None
        self.settling = False
        self._last: tuple[Any, ...] = ()

    def start(self, settling: bool = False) -> None:
        self.settling = settling
        self.since = asyncio.get_running_loop().time()
        self._last = self._state()

    def stop(self) -> None:
        self.since = None

    def _state(self) -> tuple[Any, ...]:
        replicas = tuple(
            (b, str(tp), p.log.log_end_offset, p.log.high_watermark)
            for b, node in sorted(self.cluster.brokers.items())
            for tp, p in node.replica_manager.partitions.items()
        )
        controller = self.cluster.controller
        image: dict[Any, Any] = {} if controller is None else dict(controller.controller.image.partitions)
        elections = tuple((str(tp), s.leader, s.leader_epoch, tuple(s.isr)) for tp, s in image.items())
        return replicas, elections

    def stalled_s(self) -> float:
        """Virtual seconds since the last move, 0 when not watching."""
        if self.since is None:
            return 0.0
        now = asyncio.get_running_loop().time()
        state = self._state()
        if state != self._last:
            self._last, self.since = state, now
        return now - self.since


def _scratch_dir() -> Path:
    shm = Path("/dev/shm")
    return Path(tempfile.mkdtemp(prefix="minibroker-sim-", dir=shm if shm.is_dir() else None)).resolve()


Script = Callable[["SimRun"], Awaitable[None]]


@dataclass
class SimRun:
    """What a scripted scenario drives: the cluster, its checker, the write history and the trace."""

    cluster: SimCluster
    checker: Checker
    history: WriteHistory
    trace: Trace
    partitions: list[TopicPartition]
    rng: random.Random

    def producer(self, producer_id: int, acks: int) -> Producer:
        return Producer(
            producer_id,
            self.cluster.network,
            self.cluster.time,
            random.Random(self.rng.getrandbits(64)),
            self.partitions,
            self.cluster.broker_ids,
            self.history,
            self.trace,
            acks=acks,
            rate=1.0,
            record_bytes=self.cluster.options.record_bytes,
            on_ack=self.checker.on_ack,
            idempotent=self.cluster.options.idempotence,
        )


def run_seed(
    seed: int,
    options: SimOptions,
    schedule: list[Fault] | None = None,
    keep_trace: bool = False,
    script: Script | None = None,
    recorder: Recorder | None = None,
) -> RunResult:
    """Run one seed on a fresh virtual-time loop (in this thread) and return what happened. A `recorder`
    (sim/timeline.py) hears every message and samples every replica for a page of the run."""
    started = wall.perf_counter()
    loop = VirtualTimeLoop()
    root = _scratch_dir()
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)  # the nodes' own logs are noise here; the trace says what happened
    try:
        try:
            result = loop.run_until_complete(_run(seed, options, schedule, root, keep_trace, script, recorder))
        except Exception as exc:  # noqa: BLE001 - the run's failure, reported; a sweep goes on to the next seed
            result = RunResult(seed, "", 0, loop.time(), 0.0, list(schedule or []), violation=_error(exc))
        _cancel_leftovers(loop)
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        logging.disable(previous)
        loop.close()
        shutil.rmtree(root, ignore_errors=True)
    result.wall_s = wall.perf_counter() - started
    return result


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    """Cancel the tasks a run leaves behind (nodes' loops, a killed node's handlers) and let them finish,
    so none is destroyed pending when the loop closes (which printed a traceback per task)."""
    for _ in range(3):
        pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
        if not pending:
            return
        for task in pending:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))


async def _run(
    seed: int,
    options: SimOptions,
    schedule: list[Fault] | None,
    root: Path,
    keep_trace: bool,
    script: Script | None,
    recorder: Recorder | None = None,
) -> RunResult:
    rng = random.Random(seed)
    fault_rng = random.Random(f"faults-{seed}")  # its own stream: removing faults leaves the workload alone
    trace = Trace(keep=keep_trace)
    cluster = SimCluster(root, options, random.Random(rng.getrandbits(64)), trace)
    cluster.network.recorder = recorder
    if schedule is None:
        schedule = generate(fault_rng, options.faults, options.fault_rate, options.duration_s, cluster.broker_ids)
    result = RunResult(seed, "", 0, 0.0, 0.0, schedule)
    partitions = [TopicPartition(f"t{i}", p) for i in range(options.topics) for p in range(options.partitions)]
    history = WriteHistory()
    checker = Checker(cluster, partitions, history, trace)
    failure: asyncio.Future[Violation] = asyncio.get_running_loop().create_future()
    injector = FaultInjector(cluster, checker.check)
    tasks: list[asyncio.Task[Any]] = []
    watch = _Progress(cluster)  # the liveness check: off until the load (or the settle) starts

    def guarded(coro: Any) -> asyncio.Task[Any]:
        async def run() -> None:
            try:
                await coro
            except Violation as v:
                if not failure.done():
                    failure.set_result(v)

        task = asyncio.ensure_future(run())
        tasks.append(task)
        return task

    async def scenario() -> None:
        await cluster.start_controllers()
        for broker in cluster.broker_ids:
            await cluster.start_broker(broker)

        def all_brokers_active() -> bool:
            node = cluster.controller
            return (
                node is not None
                and node.active
                and (sum(1 for b in node.controller.image.brokers.values() if b.is_active) == options.brokers)
            )

        await wait_until(all_brokers_active, 30.0, clock=cluster.time)
        await create_topics(cluster, options)
        await wait_until(lambda: all_led(cluster, partitions), 30.0, clock=cluster.time)
        if script is not None:
            await script(SimRun(cluster, checker, history, trace, partitions, random.Random(rng.getrandbits(64))))
            await settle([])
            return
        trace.event("sim", "load", faults=len(schedule))
        if options.producers > 0 and options.rate > 0:
            watch.start()
        loop = asyncio.get_running_loop()
        until = loop.time() + options.duration_s
        offset_s = loop.time()
        shifted = [
            Fault(f.at_ms + int(offset_s * 1000), f.kind, f.duration_ms, f.nodes, f.one_way, f.amount) for f in schedule
        ]
        brokers = cluster.broker_ids
        producers = [
            Producer(
                1001 + i,
                cluster.network,
                cluster.time,
                random.Random(rng.getrandbits(64)),
                partitions,
                brokers,
                history,
                trace,
                acks=options.acks,
                rate=options.rate,
                record_bytes=options.record_bytes,
                on_ack=checker.on_ack,
                idempotent=options.idempotence,
            )
            for i in range(options.producers)
        ]
        consumers = [
            Consumer(
                2001 + i, cluster.network, random.Random(rng.getrandbits(64)), partitions, brokers, checker.on_consumed
            )
            for i in range(options.consumers)
        ]
        load = [guarded(p.run(until)) for p in producers]
        consumer_tasks = [guarded(c.run(until + SETTLE_MAX_S)) for c in consumers]
        faults = guarded(injector.run(shifted))
        await asyncio.gather(*load, faults)
        await settle(consumers, consumer_tasks)

    async def settle(consumers: list[Consumer], consumer_tasks: list[asyncio.Task[Any]] | None = None) -> None:
        """Undo every fault, restart the dead, let replicas catch up, checking all the while."""
        trace.event("sim", "settle")
        watch.start(settling=True)
        cluster.network.heal()
        for controller in cluster.controller_ids:
            if controller not in cluster.controllers:
                await cluster.start_controller(controller)
        for broker in cluster.broker_ids:
            if broker not in cluster.brokers:
                await cluster.restart_broker(broker)
        checker.check()
        result.converged = await wait_until(lambda: converged(cluster, partitions), SETTLE_MAX_S, clock=cluster.time)
        watch.stop()
        checker.check()
        checker.check_producer_states()
        checker.check_metadata_logs()
        if not result.converged:
            # Liveness, whatever the longest stall was: a run may keep moving and still never get there.
            checker.fail(
                "not_converged",
                f"{SETTLE_MAX_S:.0f} virtual s after every fault was undone the replicas have not converged: "
                f"{unconverged(cluster, partitions)} (longest stall {result.longest_stall_s:.1f} s)",
            )
        for task in consumer_tasks or []:
            task.cancel()
        result.consumed = sum(c.consumed for c in consumers)

    async def ticker() -> None:
        while True:
            await asyncio.sleep(CHECK_INTERVAL_S)
            checker.check()
            if recorder is not None:
                recorder.sample(cluster, asyncio.get_running_loop().time() * 1000.0)
            stalled = watch.stalled_s()
            result.longest_stall_s = max(result.longest_stall_s, stalled)
            if stalled > NO_PROGRESS_S:
                # This ticker keeps a timer pending, so the loop's deadlock check never fires in a run: a run
                # that spins (a follower looping on one answer) or waits forever is caught here instead.
                checker.fail(
                    "no_progress",
                    f"no replica's LEO or HW and no partition's leader, epoch or ISR moved for {stalled:.1f} "
                    f"virtual s ({'settling' if watch.settling else 'under load'}); requests sent: "
                    f"{sum(cluster.network.requests.values())}",
                )

    def on_loop_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        # A node's task died of an exception nobody handled: a bug, reported like a broken invariant.
        if not loop.is_running():
            # A task collected after the run ended (it already ended in the error that left it behind):
            # nothing is traced after the end, and tracing needs the running loop's clock.
            return
        exc = context.get("exception")
        what = f"{type(exc).__name__}: {exc}" if exc is not None else str(context.get("message"))
        trace.event("sim", "unhandled-exception", what=what)
        if not failure.done():
            failure.set_result(Violation("unhandled_exception", what))

    asyncio.get_running_loop().set_exception_handler(on_loop_error)
    cluster.on_crash = checker.on_crash

    def report(violation: Violation) -> None:
        if not failure.done():
            failure.set_result(violation)

    def on_metadata(record: Any, image: Any) -> None:
        # Called as the controller replays a record: a violation goes to the run, not into the controller.
        try:
            checker.on_metadata(record, image)
        except Violation as v:
            report(v)

    cluster.on_metadata = on_metadata

    # The brokers' replication events (sim/observe.py) go to this run's checker from here to the end.
    observer = cluster.observer
    observer.checker, observer.report, observer.failed = checker, report, failure.done
    main = guarded(scenario())
    guarded(ticker())
    await asyncio.wait([main, failure], return_when=asyncio.FIRST_COMPLETED)
    observer.watching = False
    result.timeline = list(trace.recent[-80:])
    if recorder is not None:
        recorder.sample(cluster, asyncio.get_running_loop().time() * 1000.0)
    if failure.done():
        result.violation = failure.result()
        result.replicas = checker.replica_table()
    elif main.done() and not main.cancelled() and main.exception() is not None:
        # The script or the harness raised: this seed's failure, with its timeline, not the sweep's end.
        error = main.exception()
        assert error is not None
        trace.event("sim", "error", what=f"{type(error).__name__}: {error}")
        result.violation = _error(error)
        result.timeline = list(trace.recent[-80:])
        result.replicas = checker.replica_table()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await cluster.close()
    loop = asyncio.get_running_loop()
    result.virtual_s = loop.time()
    result.trace_hash = trace.digest
    result.events = trace.count
    result.trace_lines = trace.lines
    result.faults_injected = dict(sorted(injector.injected.items()))
    result.acked = len(history.acked)
    result.failed = history.failed
    result.indeterminate = history.indeterminate
    result.acks1_lost = checker.acks1_lost
    result.excused_losses = checker.excused_losses
    result.messages = cluster.network.messages
    result.requests = dict(sorted(cluster.network.requests.items()))
    return result


async def create_topics(cluster: SimCluster, options: SimOptions) -> None:
    configs = {"min.insync.replicas": str(options.min_insync_replicas)}
    if options.unclean_leader_election:
        configs["unclean.leader.election.enable"] = "true"
    request = CreateTopicsRequest(
        [
            CreatableTopic(f"t{i}", options.partitions, options.replication_factor, configs)
            for i in range(options.topics)
        ]
    )
    response = await cluster.send_to_controller(ADMIN_ID, request, 5000)
    for topic in response.topics:
        if topic.error_code:
            raise RuntimeError(f"CREATE_TOPICS failed for {topic.name}: {topic.error_message}")


def all_led(cluster: SimCluster, partitions: list[TopicPartition]) -> bool:
    for tp in partitions:
        if not any(
            (p := node.replica_manager.partitions.get(tp)) is not None and p.is_leader
            for node in cluster.brokers.values()
        ):
            return False
    return True


def converged(cluster: SimCluster, partitions: list[TopicPartition]) -> bool:
    """Every partition led, its ISR the full assignment, every replica's LEO and HW equal the leader's."""
    return unconverged(cluster, partitions) is None


def unconverged(cluster: SimCluster, partitions: list[TopicPartition]) -> str | None:
    """What keeps the cluster from having converged (the first partition that has not), None when it has."""
    for tp in partitions:
        replicas = [(b, n.replica_manager.partitions.get(tp)) for b, n in sorted(cluster.brokers.items())]
        present = [(b, p) for b, p in replicas if p is not None]
        leaders = [b for b, p in present if p.is_leader]
        if len(leaders) != 1:
            return f"{tp} is led by {leaders or 'no broker'}"
        leader = dict(present)[leaders[0]]
        if set(leader.isr) != set(leader.assignment):
            return f"{tp}: leader {leaders[0]}'s ISR {sorted(leader.isr)} is not its assignment {leader.assignment}"
        ends = {b: (p.log.log_end_offset, p.log.high_watermark) for b, p in present}
        if len(set(ends.values())) > 1:
            return f"{tp}: (LEO, HW) by broker {ends}"
    return None
