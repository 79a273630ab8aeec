"""`minibroker sim`: run seeds, sweeps, named scenarios and shrinks of the simulator.

Exit codes: 0 no violation, 1 a check failed (the seed, the check and its timeline are printed), 2 bad
usage.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import shlex
import sys
import time
from collections import Counter
from dataclasses import fields
from pathlib import Path
from typing import Any

from sim.cluster import SimOptions
from sim.faults import KINDS, Fault
from sim.runner import RunResult, run_seed
from sim.scenarios import SCENARIOS, run_scenario
from sim.shrink import DEFAULT_BUDGET_S
from sim.timeline import Recorder

EXIT_OK, EXIT_VIOLATION, EXIT_USAGE = 0, 1, 2


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="minibroker sim",
        description="Run the real broker, fetcher and controller classes on virtual time over a seeded "
        "in-memory network and disk, under a seeded workload and faults, checking the replication "
        "invariants after every event. The same seed gives the same history (its trace hash).",
        epilog="exit codes: 0 no violation, 1 a check failed, 2 bad usage. See docs/simulation.md.",
    )
    runs = p.add_mutually_exclusive_group()
    runs.add_argument("--seed", type=int, help="run this one seed (default 1)")
    runs.add_argument("--seeds", metavar="A..B", help="sweep seeds A to B inclusive, one summary line each")
    runs.add_argument(
        "--scenario",
        choices=list(SCENARIOS),
        help="play a scripted KIP sequence",
    )
    p.add_argument("--jobs", type=int, default=1, help="processes for a sweep (default 1)")
    p.add_argument(
        "--spark",
        nargs="?",
        const="local[*]",
        metavar="MASTER",
        help="run the --seeds sweep as a Spark job on MASTER (default local[*]); one row per seed in --out",
    )
    p.add_argument(
        "--out",
        metavar="DIR",
        help="with --spark: where the seeds table (Parquet) goes; a sweep started again skips the seeds in it",
    )
    w = p.add_argument_group("workload")
    w.add_argument("--brokers", type=int, default=3)
    w.add_argument("--topics", type=int, default=1)
    w.add_argument("--partitions", type=int, default=6, help="partitions per topic")
    w.add_argument("--replication-factor", type=int, default=3)
    w.add_argument("--min-insync-replicas", type=int, default=2)
    w.add_argument("--acks", choices=["all", "-1", "1"], default="all")
    w.add_argument("--producers", type=int, default=2)
    w.add_argument("--rate", type=float, default=50.0, help="PRODUCE requests per virtual second per producer")
    w.add_argument("--record-bytes", type=int, default=64)
    w.add_argument(
        "--idempotence",
        action="store_true",
        help="idempotent producers (acks=all): resend every write left in doubt; the leader must answer a copy "
        "with its original offset",
    )
    w.add_argument("--consumers", type=int, default=1, help="consumers reading every partition from offset 0")
    w.add_argument("--duration", type=float, default=30.0, help="virtual seconds of load (then a settle phase)")
    f = p.add_argument_group("faults")
    f.add_argument("--faults", default="", help=f"comma-separated kinds, from: {','.join(KINDS)}")
    f.add_argument("--fault-rate", type=float, default=0.3, help="faults per virtual second (default 0.3)")
    f.add_argument("--schedule", metavar="JSON|FILE", help="an explicit fault schedule (as --shrink prints)")
    f.add_argument("--crash-loses-unflushed", action="store_true", help="a killed broker loses what it never fsynced")
    f.add_argument("--unclean-leader-election", action="store_true")
    f.add_argument(
        "--truncation",
        choices=["fetch", "epoch", "hw"],
        default="fetch",
        help="fetch: divergence answered in FETCH (2.7+); epoch: OffsetsForLeaderEpoch first; hw: before KIP-101",
    )
    f.add_argument("--epoch-reply", choices=["kip279", "kip101"], default="kip279", help="kip101: before KIP-279")
    o = p.add_argument_group("output")
    o.add_argument("--shrink", action="store_true", help="on a violation, shrink the fault schedule")
    o.add_argument(
        "--shrink-budget",
        type=float,
        default=DEFAULT_BUDGET_S,
        metavar="SECONDS",
        help=f"wall seconds a shrink may take (default {DEFAULT_BUDGET_S:.0f}); when they run out, the smallest "
        "failing schedule found so far is printed",
    )
    o.add_argument("--trace", metavar="FILE", help="write the event trace of a single run as JSON lines")
    o.add_argument(
        "--html",
        metavar="FILE",
        help="write a timeline page of a single run, a scenario or a shrink's smallest run (opens offline)",
    )
    o.add_argument("--json", action="store_true", help="print one JSON report instead of text")
    o.add_argument("--quiet", action="store_true", help="sweep: print only failing seeds and the total")
    return p


def options_from_args(args: argparse.Namespace) -> SimOptions:
    given = [k for k in args.faults.split(",") if k]
    unknown = [k for k in given if k not in KINDS]
    if unknown:
        raise ValueError(f"unknown fault kind(s) {', '.join(unknown)}; known: {', '.join(KINDS)}")
    kinds = tuple(k for k in KINDS if k in given)  # one order, whatever the order given: the same schedule
    options = SimOptions(
        brokers=args.brokers,
        topics=args.topics,
        partitions=args.partitions,
        replication_factor=args.replication_factor,
        min_insync_replicas=args.min_insync_replicas,
        acks=-1 if args.acks in ("all", "-1") else 1,
        producers=args.producers,
        rate=args.rate,
        record_bytes=args.record_bytes,
        consumers=args.consumers,
        duration_s=args.duration,
        faults=kinds,
        fault_rate=args.fault_rate,
        crash_loses_unflushed=args.crash_loses_unflushed,
        truncation=args.truncation,
        epoch_reply=args.epoch_reply,
        unclean_leader_election=args.unclean_leader_election,
        idempotence=args.idempotence,
    )
    problems = [
        what
        for what, bad in (
            ("--brokers must be at least 1", options.brokers < 1),
            (
                "--replication-factor must be between 1 and --brokers",
                not 1 <= options.replication_factor <= options.brokers,
            ),
            ("--partitions and --topics must be at least 1", options.partitions < 1 or options.topics < 1),
            ("--rate must be positive", options.rate <= 0),
            ("--record-bytes must be at least 16", options.record_bytes < 16),
            ("--duration must be at least 5 virtual seconds", options.duration_s < 5),
        )
        if bad
    ]
    if problems:
        raise ValueError("; ".join(problems))
    return options


def replay_argv(seed: int, options: SimOptions, schedule: list[Fault] | None) -> str:
    """A command line that replays exactly this run."""
    defaults = SimOptions()
    argv = ["minibroker", "sim", "--seed", str(seed)]
    names = {"duration_s": "--duration", "acks": "--acks"}
    for f in fields(SimOptions):
        value, default = getattr(options, f.name), getattr(defaults, f.name)
        if value == default or f.name == "broker_overrides":
            continue
        if f.name == "faults":
            argv += ["--faults", ",".join(value)]
            continue
        flag = names.get(f.name, "--" + f.name.replace("_", "-"))
        if isinstance(value, bool):
            argv.append(flag)
        else:
            argv += [flag, "all" if f.name == "acks" and value == -1 else str(value)]
    if schedule is not None:
        argv += ["--schedule", json.dumps([x.to_json() for x in schedule], separators=(",", ":"))]
    return shlex.join(argv)


def parse_schedule(text: str) -> list[Fault]:
    path = Path(text)
    raw = json.loads(path.read_text() if not text.lstrip().startswith("[") and path.exists() else text)
    if not isinstance(raw, list):
        raise ValueError("--schedule must be a JSON list of faults")
    return [Fault.from_json(item) for item in raw]


def format_timeline(result: RunResult) -> str:
    lines = []
    for e in result.timeline:
        details = {k: v for k, v in e.items() if k not in ("t_ms", "node", "event")}
        text = " ".join(f"{k}={v}" for k, v in details.items())
        lines.append(f"  {e['t_ms'] / 1000.0:9.3f}s  {str(e['node']):>9}  {e['event']:<22} {text}")
    lines.append("  replicas at the violation (broker tp role epoch hw leo isr):")
    for r in result.replicas:
        lines.append(
            f"    {r['broker']:>3} {r['tp']:<8} {r['role']:<8} e{r['epoch']:<3} hw={r['hw']:<6} leo={r['leo']:<6}"
            + (f" isr={r['isr']}" if r["isr"] is not None else "")
        )
    return "\n".join(lines)


def _line(result: RunResult) -> str:
    s = result.summary()
    status = "ok" if result.ok else f"VIOLATION {s['check']}"
    faults = ",".join(f"{k}:{v}" for k, v in s["faults"].items()) or "-"
    # Faults injected before the run ended (at its violation, if any), not the whole schedule.
    return (
        f"seed {s['seed']:>6}  {status:<40} {'converged' if s['converged'] else 'unconverged':<11}  "
        f"trace {s['trace_hash']}  events {s['events']:>6}  "
        f"virtual {s['virtual_s']:7.1f}s  wall {s['wall_s']:6.2f}s  acked {s['acked']:>5}  faults injected {faults}"
    )


def _run_one(job: tuple[int, SimOptions]) -> RunResult:
    seed, options = job
    result = run_seed(seed, options)
    result.trace_lines = []
    return result


def report(results: list[RunResult], wall_s: float) -> dict[str, Any]:
    faults: Counter[str] = Counter()
    for r in results:
        faults.update(r.faults_injected)
    return {
        "seeds": [r.seed for r in results],
        "runs": len(results),
        "violations": sum(1 for r in results if not r.ok),
        "violations_by_check": dict(Counter(r.violation.check for r in results if r.violation is not None)),
        "failing_seeds": [r.seed for r in results if not r.ok],
        "events": sum(r.events for r in results),
        "virtual_s": round(sum(r.virtual_s for r in results), 3),
        "wall_s": round(wall_s, 3),
        "faults_by_kind": dict(sorted(faults.items())),
        "acked": sum(r.acked for r in results),
        "failed": sum(r.failed for r in results),
        "indeterminate": sum(r.indeterminate for r in results),
        "acks1_lost": sum(r.acks1_lost for r in results),
        "excused_losses": sum(r.excused_losses for r in results),
        "runs_detail": [r.summary() for r in results],
    }


# What a scenario takes from the command line; it sets its own cluster, workload and faults.
SCENARIO_OPTIONS = frozenset({"scenario", "seed", "truncation", "epoch_reply", "trace", "json", "html"})


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        options = options_from_args(args)
        schedule = parse_schedule(args.schedule) if args.schedule else None
    except (ValueError, OSError) as exc:
        print(f"minibroker sim: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if (args.spark or args.out) and not (args.seeds and args.spark and args.out):
        print("minibroker sim: error: --spark and --out go together, with --seeds A..B", file=sys.stderr)
        return EXIT_USAGE
    started = time.perf_counter()
    if args.scenario:
        defaults = vars(parser.parse_args([]))
        ignored = [
            "--" + name.replace("_", "-")
            for name, value in vars(args).items()
            if name not in SCENARIO_OPTIONS and value != defaults[name]
        ]
        if ignored:
            print(
                f"minibroker sim: error: --scenario {args.scenario} sets its own cluster, workload and faults; "
                f"it takes only --seed, --truncation, --epoch-reply, --trace, --html and --json, not "
                f"{', '.join(ignored)}",
                file=sys.stderr,
            )
            return EXIT_USAGE
        recorder = Recorder() if args.html else None
        result = run_scenario(
            args.scenario,
            args.seed or 0,
            args.truncation,
            args.epoch_reply,
            keep_trace=bool(args.trace or args.html),
            recorder=recorder,
        )
        return _finish_single(args, result, options, started, scenario=True, recorder=recorder)
    if args.seeds:
        try:
            first, last = (int(x) for x in args.seeds.split(".."))
        except ValueError:
            print(f"minibroker sim: error: --seeds expects A..B, got {args.seeds!r}", file=sys.stderr)
            return EXIT_USAGE
        if last < first:
            print("minibroker sim: error: --seeds A..B needs A <= B", file=sys.stderr)
            return EXIT_USAGE
        if args.spark:
            return _spark_sweep(args, first, last, options)
        jobs = [(seed, options) for seed in range(first, last + 1)]
        results: list[RunResult] = []
        if args.jobs > 1:
            with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
                for result in pool.imap(_run_one, jobs):
                    results.append(result)
                    if not args.json and (not args.quiet or not result.ok):
                        print(_line(result), flush=True)
        else:
            for job in jobs:
                result = _run_one(job)
                results.append(result)
                if not args.json and (not args.quiet or not result.ok):
                    print(_line(result), flush=True)
        summary = report(results, time.perf_counter() - started)
        if args.json:
            print(json.dumps(summary))
        else:
            print(
                f"{summary['runs']} seeds, {summary['violations']} with a violation "
                f"{summary['violations_by_check'] or ''}; {summary['virtual_s']:.0f} virtual s in "
                f"{summary['wall_s']:.1f} wall s"
            )
            for seed in summary["failing_seeds"][:5]:
                print(f"  replay: {replay_argv(seed, options, None)}")
        return EXIT_OK if summary["violations"] == 0 else EXIT_VIOLATION
    seed = 1 if args.seed is None else args.seed
    recorder = Recorder() if args.html else None
    result = run_seed(seed, options, schedule, keep_trace=bool(args.trace or args.html), recorder=recorder)
    return _finish_single(args, result, options, started, schedule=schedule, recorder=recorder)


def _spark_sweep(args: argparse.Namespace, first: int, last: int, options: SimOptions) -> int:
    from sim.spark_sweep import run_sweep

    try:
        summary = run_sweep(first, last, options, Path(args.out), args.spark)
    except ValueError as exc:
        print(f"minibroker sim: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.json:
        print(json.dumps(summary.to_json()))
    else:
        print(
            f"{summary.runs} seeds ({summary.ran_now} run now), {summary.violations} with a violation "
            f"{summary.violations_by_check or ''}; {summary.virtual_s:.0f} virtual s, {summary.seed_wall_s:.0f} s of "
            f"runs in {summary.wall_s:.1f} wall s; table {summary.table}"
        )
        for seed, check, message in summary.failing:
            print(f"  seed {seed}: {check}: {message}")
            print(f"    replay: {replay_argv(seed, options, None)}")
    return EXIT_OK if summary.violations == 0 else EXIT_VIOLATION


def _finish_single(
    args: argparse.Namespace,
    result: RunResult,
    options: SimOptions,
    started: float,
    scenario: bool = False,
    schedule: list[Fault] | None = None,
    recorder: Recorder | None = None,
) -> int:
    """`recorder`: what the run recorded for its --html page."""
    if args.trace:
        Path(args.trace).write_text("".join(line + "\n" for line in result.trace_lines))
    shrunk: dict[str, Any] | None = None
    if args.shrink and result.violation is not None and not scenario:
        from sim.shrink import shrink

        def say(line: str) -> None:
            if not args.json:
                print(line, flush=True)

        found = shrink(result.seed, options, result, progress=say, budget_s=args.shrink_budget)
        shrunk = {
            "faults_before": len(result.schedule),
            "faults_after": len(found.schedule),
            "runs": found.runs,
            "finished": found.finished,
            "schedule": [f.to_json() for f in found.schedule],
            "replay": replay_argv(result.seed, options, found.schedule),
        }
        result, schedule = found.run, found.schedule
    if recorder is not None:
        page_run = result
        if shrunk is not None:  # the page is of the smallest failing run: run it once more, recorded
            recorder = Recorder()
            page_run = run_seed(result.seed, options, schedule, True, None, recorder)
            if page_run.trace_hash != result.trace_hash:
                print(f"minibroker sim: warning: the recorded run differs ({page_run.trace_hash})", file=sys.stderr)
        _write_html(args, page_run, recorder, options, schedule, scenario)
    if args.json:
        out = report([result], time.perf_counter() - started)
        out["trace_hash"] = result.trace_hash
        if result.violation is not None:
            out["timeline"] = result.timeline
            out["replicas"] = result.replicas
        if shrunk is not None:
            out["shrunk"] = shrunk
        if scenario:
            out["scenario"] = args.scenario
        print(json.dumps(out))
    else:
        name = f"scenario {args.scenario}" if scenario else f"seed {result.seed}"
        print(_line(result).replace(f"seed {result.seed:>6}", name, 1))
        if scenario and result.violation is None:
            print(_scenario_steps(result))
        if result.violation is not None:
            print(f"\n{name}: check {result.violation.check} failed: {result.violation.message}")
            print("timeline (virtual time, node, event):")
            print(format_timeline(result))
            if not scenario:
                print(f"\nreplay: {replay_argv(result.seed, options, schedule)}")
        if shrunk is not None:
            stopped = (
                ""
                if shrunk["finished"]
                else f" before the shrink budget of {args.shrink_budget:g} s ran out (--shrink-budget): the best "
                "so far, not the smallest"
            )
            print(
                f"\nshrunk: schedule of {shrunk['faults_before']} -> {shrunk['faults_after']} faults (the whole "
                f"schedule, injected before the violation or not) in {shrunk['runs']} runs{stopped}; "
                f"replay the smallest found:\n  {shrunk['replay']}"
            )
    return EXIT_OK if result.violation is None else EXIT_VIOLATION


def _write_html(
    args: argparse.Namespace,
    result: RunResult,
    recorder: Recorder,
    options: SimOptions,
    schedule: list[Fault] | None,
    scenario: bool,
) -> None:
    """The timeline page of `result`, a run made with `recorder` and its trace kept."""
    from sim.timeline import write_page

    if scenario:
        title = f"minibroker sim --scenario {args.scenario} --truncation {args.truncation}"
        title += f" --epoch-reply {args.epoch_reply}"
    else:
        title = replay_argv(result.seed, options, schedule)
    events = [json.loads(line) for line in result.trace_lines]
    path = write_page(Path(args.html), result, recorder, title, events)
    if not args.json:
        print(f"timeline page: {path}")


def _scenario_steps(result: RunResult) -> str:
    steps = [e for e in result.timeline if e["event"] == "step"]
    return "\n".join(f"  {e['t_ms'] / 1000.0:9.3f}s  {e['what']}" for e in steps)
