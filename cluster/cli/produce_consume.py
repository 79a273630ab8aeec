"""`minibroker produce` and `minibroker consume`, after kafka-console-producer, kafka-console-consumer and kcat."""

from __future__ import annotations

import argparse
import signal
import sys
from typing import Any

from cluster.cli.common import CliError, Subcommands, add_client_options, emit, run_async
from cluster.exit_codes import EXIT_CHECK_FAILED, EXIT_CLUSTER_ERROR, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE


def _properties(items: list[str] | None, known: dict[str, str]) -> dict[str, str]:
    from client.console import parse_properties

    try:
        return parse_properties(items or [], known)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def cmd_produce(args: argparse.Namespace) -> int:
    from client.console import PRODUCER_PROPERTIES, LineReader, parse_header
    from client.producer import produce_command

    props = _properties(args.property, PRODUCER_PROPERTIES)
    try:
        headers = [parse_header(h) for h in args.header or []]
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    key = args.key.encode() if args.key is not None else None
    records: Any
    if args.count is not None:
        if args.count < 0 or args.size < 0:
            raise CliError("--count and --size must be >= 0", EXIT_USAGE)
        records = None
    else:
        reader = LineReader(props, key, headers)
        records = reader.records(sys.stdin.buffer)
    result = run_async(produce_command(args, records, key=key, headers=headers))
    reasons = "".join(f"{', ' if i else ': '}{e['records']} {e['error']}" for i, e in enumerate(result["errors"]))
    text = f"produced {result['acked']} records to {args.topic} ({result['failed']} failed{reasons})"
    emit(args, result, lambda: text)
    if result.get("input_error"):
        raise CliError(f"{result['input_error']} (records before it were sent)", EXIT_USAGE)
    return EXIT_OK if result["failed"] == 0 else EXIT_CLUSTER_ERROR


def _consumer_fetch_config(items: list[str] | None) -> dict[str, int]:
    from client.consumer import fetch_config

    props: dict[str, str] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep:
            raise CliError(f"--consumer-property expects KEY=VALUE, got {item!r}", EXIT_USAGE)
        props[key.strip()] = value.strip()
    try:
        return fetch_config(props)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None


def cmd_consume(args: argparse.Namespace) -> int:
    import asyncio

    from client.console import CONSUMER_PROPERTIES, make_formatter
    from client.consumer import consume_command
    from cluster.cli.group import consume_group

    if args.group and args.partition is not None:
        raise CliError("give --group or --partition, not both: a group assigns the partitions", EXIT_USAGE)
    props = _properties(args.property, CONSUMER_PROPERTIES)
    args.fetch_config = _consumer_fetch_config(args.consumer_property)
    start = _start_offset(args)
    if args.max_messages is not None and args.max_messages < 0:
        args.max_messages = None  # Kafka's -1: no limit
    try:
        formatter = make_formatter(props, args.format, args.json, args.print_offsets)
    except ValueError as exc:
        raise CliError(str(exc), EXIT_USAGE) from None
    seen = {"count": 0}

    def counted(topic: str, partition: int, rec: Any) -> bytes:
        seen["count"] += 1
        return formatter(topic, partition, rec)

    async def until_signalled() -> dict[str, Any] | None:
        # SIGTERM cancels the consumer the way the event loop's runner does on Ctrl-C, so its connections
        # close before it returns; None says it was stopped.
        task = asyncio.current_task()
        assert task is not None
        stopped: list[int] = []

        def on_term() -> None:
            stopped.append(signal.SIGTERM)
            task.cancel()

        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, on_term)
        try:
            if args.group:
                return await asyncio.to_thread(consume_group, args, counted, start)
            return dict(await consume_command(args, counted, start))
        except asyncio.CancelledError:
            if stopped:
                return None
            raise

    # Ctrl-C or SIGTERM (the usual end with --timeout-ms -1) still says how many records were printed,
    # as Kafka's console consumer does on shutdown.
    try:
        result = run_async(until_signalled())
    except KeyboardInterrupt:
        result = None
    if result is None:
        sys.stdout.flush()
        print(f"Processed a total of {seen['count']} messages", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(f"Processed a total of {result['count']} messages", file=sys.stderr)
    if result["corrupt"]:
        # What was readable was printed; the partitions that stopped at a corrupt batch make it an error.
        print(f"minibroker: error: {len(result['corrupt'])} partition(s) stopped at a corrupt batch", file=sys.stderr)
        return EXIT_CLUSTER_ERROR
    if args.max_messages is not None and result["count"] < args.max_messages:
        # Kafka's console consumer exits 0 when --timeout-ms passes; --fail-on-timeout makes it a check.
        if args.fail_on_timeout:
            print(
                f"minibroker: check failed: {result['count']} of --max-messages {args.max_messages} records "
                f"arrived within --timeout-ms {args.timeout_ms}",
                file=sys.stderr,
            )
            return EXIT_CHECK_FAILED
    return EXIT_OK


def _start_offset(args: argparse.Namespace) -> str | int:
    """--offset earliest|latest|N|-N (kcat's -o), or --from-beginning; default latest, like Kafka's tool."""
    spec = args.offset
    if spec is None:
        return "earliest" if args.from_beginning else "latest"
    if args.from_beginning:
        raise CliError("give --from-beginning or --offset, not both", EXIT_USAGE)
    aliases = {"earliest": "earliest", "beginning": "earliest", "latest": "latest", "end": "latest"}
    if spec in aliases:
        return aliases[spec]
    try:
        return int(spec)
    except ValueError:
        raise CliError(
            f"--offset expects earliest, latest, an offset N or -N (N before the end), got {spec!r}", EXIT_USAGE
        ) from None


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "produce",
        help="write records",
        description="Write lines from stdin, or --count generated records, to a topic, like "
        "kafka-console-producer. Records with a key go to the partition Kafka's partitioner picks for it.",
        epilog="properties (Kafka's names): parse.key, key.separator (tab), parse.headers, headers.delimiter "
        "(tab), headers.separator (,), headers.key.separator (:), null.marker. A line is "
        "[HEADERS<headers.delimiter>][KEY<key.separator>]VALUE.",
    )
    p.add_argument("topic")
    p.add_argument("--count", type=int, help="generate this many records instead of reading stdin")
    p.add_argument("--size", type=int, default=100, help="bytes per generated record")
    p.add_argument("--acks", choices=["0", "1", "all", "-1"], default="all")
    p.add_argument("--partition", type=int, help="write to this partition only (default: by key, else in turn)")
    p.add_argument("--key", help="this key on every record (kcat -k)")
    p.add_argument("--header", action="append", metavar="NAME=VALUE", help="a header on every record (repeatable)")
    p.add_argument(
        "--property", action="append", metavar="NAME=VALUE", help="line reader property, e.g. parse.key=true"
    )
    p.add_argument(
        "--batch-size", type=int, default=16384, help="batch.size: bytes of records per partition batch (16384)"
    )
    p.add_argument("--linger-ms", type=int, default=5, help="linger.ms: how long a batch waits to fill (5)")
    p.add_argument(
        "--no-idempotence",
        action="store_true",
        help="enable.idempotence=false: never resend a batch that may have been written (idempotence is on by "
        "default with --acks all: a resent batch is written once)",
    )
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    add_client_options(p)
    p.set_defaults(func=cmd_produce)

    p = sub.add_parser(
        "consume",
        help="read records",
        description="Read records and print them, like kafka-console-consumer (or kcat -C with --format).",
        epilog="properties (Kafka's names): print.key, print.value, print.partition, print.offset, "
        "print.timestamp, print.headers, key.separator (tab), line.separator, headers.separator (,), "
        "headers.key.separator (:), null.literal (null). --format tokens (kcat -f): %t topic, %p partition, "
        "%o offset, %T timestamp, %k key, %K key length, %s value, %S value length, %h headers, "
        "%% percent; \\n \\t escapes. Exit 0 when --timeout-ms passes, as Kafka's tool does, unless "
        "--fail-on-timeout.",
    )
    p.add_argument("topic")
    p.add_argument("--from-beginning", action="store_true", help="same as --offset earliest")
    p.add_argument(
        "--offset", help="where to start in each partition: earliest, latest (default), N, or -N (N before the end)"
    )
    p.add_argument("--partition", type=int)
    p.add_argument(
        "--group",
        help="consume as a member of this consumer group (through the Kafka listeners): the group assigns the "
        "partitions and what is printed is committed; a new group starts at --offset earliest|latest",
    )
    p.add_argument("--max-messages", type=int, help="exit after this many records (default, or -1: no limit)")
    p.add_argument(
        "--timeout-ms",
        type=int,
        default=10000,
        help="exit after this long without a new record (default 10000; -1: never, Kafka's default)",
    )
    p.add_argument(
        "--fail-on-timeout",
        action="store_true",
        help="exit 1 when --timeout-ms passes before --max-messages records arrived",
    )
    p.add_argument("--print-offsets", action="store_true", help="print partition and offset before each value")
    p.add_argument("--property", action="append", metavar="NAME=VALUE", help="formatter property, e.g. print.key=true")
    p.add_argument(
        "--consumer-property",
        action="append",
        metavar="KEY=VALUE",
        help="a consumer config: max.partition.fetch.bytes (default 1048576; e.g. 8388608 for 8 MiB fetches), "
        "fetch.max.bytes (52428800), fetch.min.bytes (1), fetch.max.wait.ms (200)",
    )
    p.add_argument("--format", metavar="FMT", help="kcat-style format string, e.g. '%%k:%%s\\n'")
    p.add_argument("--json", action="store_true", help="one JSON object per record, one per line")
    add_client_options(p)
    p.set_defaults(func=cmd_consume)
