"""A local cluster: a quorum of controllers and N brokers as child processes, each with its own dirs and log.

Layout of a cluster directory (`--dir D`):

    D/cluster.json                 who runs where: pids, ports, dirs (written once everything is up)
    D/bootstrap.servers            the brokers' HOST:PORT list, one line: what client commands' --dir reads
    D/kafka.bootstrap.servers      the brokers' Kafka listeners, the same way: what Kafka clients and kcat take
    D/controller-<id>/controller.properties, controller.log, controller.pid, metadata/
    D/broker-<id>/broker.properties, storage, broker.pid, data/
    D/metrics/                     every broker's JSON-lines metrics (the lag dashboard reads these)

The controllers (node ids 3000, 3001, ...; `--controllers`, 3 by default) are the voters of the metadata
quorum (`controller.quorum.voters`); one of them is the active controller at a time, elected among them.

Every node has its own loopback address (`--base-address`, default 127.0.0.10: controller 3000 there,
controller 3000 + i at base - i, broker N at base + N; Linux routes all of 127.0.0.0/8 to `lo` with no
set-up). It listens there and opens every connection to another node from there (`local.address`), so each
link between two nodes is one address pair that `minibroker chaos` can cut, slow down or make lossy
without touching the others.

A node's pid file is written by the process itself (`--pid-file`, and by default next to a config file
that lives in a cluster directory), so it stays current whoever starts the node: `cluster up`,
`minibroker broker start`, chaos, or the node's own command line by hand. `cluster status`,
`cluster down` and the lifecycle commands read the pid file first and cluster.json's pid second, and
trust a pid only while that process still runs the node's config file.

Processes are started with `python -m cluster broker|controller --config <file>` in their own
session (so a Ctrl-C in the terminal reaches only the launcher, which then stops them in order:
brokers with SIGTERM — controlled shutdown — then the controllers).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import random
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from server_common.config import ConfigError

# Every `minibroker` command that names a local cluster loads its state from here (`--dir`, `cluster
# status`, the CLI's errors), so what only starting a cluster or checking its config uses (the config
# definitions, the MQTT client, a connection, the event loop's clock) is imported by the functions that
# use it.

STATE_FILE = "cluster.json"
BOOTSTRAP_FILE = "bootstrap.servers"
KAFKA_BOOTSTRAP_FILE = "kafka.bootstrap.servers"
FIRST_CONTROLLER_ID = 3000
# Where `cluster up --ack-journal` (and every fresh chaos cluster) has broker N journal what it acknowledged:
# broker-N/ACK_JOURNAL_FILE (produce.ack.journal, broker/produce_ack_journal.py).
ACK_JOURNAL_FILE = "produce-ack.journal"
#: What a topic created without a partition count or replication factor gets under `cluster up` (Kafka
#: auto-creating one for a producer, a CREATE_TOPICS giving -1): a cluster run to watch replication gets
#: followers to watch and a leader on each broker, instead of Kafka's num.partitions=1 and
#: default.replication.factor=1 (one replica, nothing replicated, unavailable while its broker is down).
#: The replication factor is at most the number of brokers, so a smaller cluster creates them too.
AUTO_TOPIC_PARTITIONS = 3
AUTO_TOPIC_REPLICATION_FACTOR = 3
DEFAULT_BASE_ADDRESS = "127.0.0.10"
KAFKA_PORT_OFFSET = 200  # a broker's Kafka listener: its msgpack port + 200 (9292 beside 9092)
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")


class ClusterError(RuntimeError):
    pass


class PortInUseError(ClusterError):
    pass


class BadAddressError(ClusterError):
    pass


@dataclass
class ProcessInfo:
    role: str  # "controller" or "broker"
    node_id: int
    host: str
    port: int
    pid: int
    dir: str
    log: str
    config: str
    kafka_port: int = 0  # a broker's Kafka-protocol (PLAINTEXT) listener on the same host; 0: none


@dataclass
class LocalClusterState:
    dir: str
    controllers: list[ProcessInfo]
    brokers: list[ProcessInfo] = field(default_factory=list)
    metrics_dir: str = ""
    secret: str | None = None

    @property
    def nodes(self) -> list[ProcessInfo]:
        return [*self.controllers, *self.brokers]

    @property
    def quorum_voters(self) -> str:
        """controller.quorum.voters for this cluster."""
        return ",".join(f"{c.node_id}@{c.host}:{c.port}" for c in self.controllers)

    def controller(self, node_id: int) -> ProcessInfo:
        for c in self.controllers:
            if c.node_id == node_id:
                return c
        raise ClusterError(f"no controller {node_id} in this cluster")

    def save(self) -> None:
        path = Path(self.dir) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        os.replace(tmp, path)

    @classmethod
    def load(cls, cluster_dir: Path) -> LocalClusterState:
        path = cluster_dir / STATE_FILE
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            raise ClusterError(
                f"no cluster in {cluster_dir} (no {STATE_FILE}); start one with "
                f"`minibroker cluster up --dir {shlex.quote(str(cluster_dir))}`"
            ) from None
        except (OSError, json.JSONDecodeError) as exc:
            raise ClusterError(f"cannot read {path}: {exc}") from None
        raw["controllers"] = [ProcessInfo(**c) for c in raw["controllers"]]
        raw["brokers"] = [ProcessInfo(**b) for b in raw["brokers"]]
        return cls(**raw)

    def broker(self, broker_id: int) -> ProcessInfo:
        for b in self.brokers:
            if b.node_id == broker_id:
                return b
        raise ClusterError(f"no broker {broker_id} in this cluster")

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{b.host}:{b.port}" for b in self.brokers)

    @property
    def kafka_bootstrap(self) -> str:
        """bootstrap.servers for Kafka clients (their PLAINTEXT listeners)."""
        return ",".join(f"{b.host}:{b.kafka_port}" for b in self.brokers if b.kafka_port)


def free_ports(n: int) -> list[int]:
    """n distinct TCP ports that were free on 127.0.0.1 a moment ago."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); ask /proc when we can.
    with contextlib.suppress(OSError):
        stat = Path(f"/proc/{pid}/stat").read_text()
        if stat.rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def node_addresses(base_address: str, num_brokers: int, num_controllers: int = 1) -> tuple[list[str], list[str]]:
    """Each controller's address (base, base-1, ...) and each broker's (base+1, base+2, ...); all must lie
    in 127.0.0.0/8."""
    try:
        base = ipaddress.ip_address(base_address)
    except ValueError:
        raise BadAddressError(f"--base-address: {base_address!r} is not an IPv4 address") from None
    first, last = int(base) - num_controllers + 1, int(base) + num_brokers
    if base not in LOOPBACK or first <= int(LOOPBACK.network_address) or last > int(LOOPBACK.broadcast_address) - 1:
        raise BadAddressError(
            f"--base-address: {base_address} - {num_controllers - 1} controllers and + {num_brokers} brokers must "
            "stay inside 127.0.0.0/8 (loopback addresses need no set-up)"
        )
    controllers = [str(ipaddress.ip_address(int(base) - i)) for i in range(num_controllers)]
    return controllers, [str(ipaddress.ip_address(int(base) + i + 1)) for i in range(num_brokers)]


def random_base_address() -> str:
    """A base address in 127.0.0.0/8 away from the default: a throwaway cluster (chaos, tests) then shares
    no address with another cluster on this machine, so a rule naming its addresses touches only it."""
    return f"127.{random.randint(1, 254)}.{random.randint(0, 255)}.10"


def pid_file(info: ProcessInfo) -> Path:
    return Path(info.dir) / f"{info.role}.pid"


def default_pid_file(role: str, config_file: Path | None) -> Path | None:
    """A node started by hand from a cluster directory's config keeps that directory's pid file current."""
    if config_file is None:
        return None
    node_dir = config_file.resolve().parent
    return node_dir / f"{role}.pid" if (node_dir.parent / STATE_FILE).exists() else None


def write_pid_file(path: Path) -> None:
    tmp = path.with_suffix(".pid.tmp")
    tmp.write_text(f"{os.getpid()}\n")
    os.replace(tmp, path)


def remove_pid_file(path: Path) -> None:
    """Remove it only while it still names us: a newer process of the same node may have replaced it."""
    with contextlib.suppress(OSError, ValueError):
        if int(path.read_text().strip()) == os.getpid():
            path.unlink()


def _runs_config(pid: int, config: str) -> bool:
    """Does `pid` run the node with this config file? (pids are reused; unreadable /proc: assume so)"""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        cwd = Path(f"/proc/{pid}/cwd").resolve()
    except OSError:
        return True
    wanted = Path(config).resolve()
    # started by hand, the node may name its config relative to its own working directory
    return any(arg and (cwd / os.fsdecode(arg)).resolve() == wanted for arg in args)


def node_pid(info: ProcessInfo) -> int:
    """The node's current pid: its pid file's when that process runs the node, else cluster.json's when that
    one does, else the last known (dead) one."""
    candidates = []
    with contextlib.suppress(OSError, ValueError):
        candidates.append(int(pid_file(info).read_text().strip()))
    candidates.append(info.pid)
    for pid in candidates:
        if pid_alive(pid) and _runs_config(pid, info.config):
            return pid
    return candidates[0]


def node_alive(info: ProcessInfo) -> bool:
    pid = node_pid(info)
    return pid_alive(pid) and _runs_config(pid, info.config)


def node_paused(info: ProcessInfo) -> bool:
    """Stopped by SIGSTOP (`broker pause`, chaos `pause`): state T in /proc."""
    try:
        stat = Path(f"/proc/{node_pid(info)}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] in ("T", "t")


def _write_properties(path: Path, props: dict[str, Any]) -> None:
    lines = [f"{k}={v}" for k, v in props.items() if v is not None]
    path.write_text("\n".join(lines) + "\n")


def spawn(role: str, config_file: Path, log_file: Path) -> subprocess.Popen[bytes]:
    """Start a node; it writes its own pid file next to its config (`--pid-file`)."""
    log = open(log_file, "ab")  # noqa: SIM115 - handed to the child
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    argv = [
        sys.executable,
        "-m",
        "cluster",
        role,
        "--config",
        str(config_file),
        "--pid-file",
        str(config_file.parent / f"{role}.pid"),
    ]
    profile_dir = env.get("BENCH_PROFILE_DIR")
    if profile_dir:  # benchmarks' CPU profiles: the process writes its cProfile stats when it exits
        out = Path(profile_dir) / f"{role}-{config_file.parent.name}.prof"
        argv = [sys.executable, "-m", "bench.common", "profiled", "--out", str(out), "--", *argv[3:]]
    try:
        return subprocess.Popen(
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )
    finally:
        log.close()


def controller_props(
    cluster_dir: Path,
    node_id: int,
    port: int,
    voters: str,
    secret: str | None,
    overrides: dict[str, str],
    host: str = "127.0.0.1",
    num_brokers: int = AUTO_TOPIC_REPLICATION_FACTOR,
) -> dict[str, Any]:
    props: dict[str, Any] = {
        "node.id": node_id,
        "listeners": f"{host}:{port}",
        "local.address": host,
        "metadata.log.dir": str(cluster_dir / f"controller-{node_id}" / "metadata"),
        "controller.quorum.voters": voters,
        "cluster.secret": secret,
        "broker.session.timeout.ms": 3000,
        "broker.heartbeat.interval.ms": 500,
        **auto_topic_defaults(num_brokers),
    }
    from broker.config import CONTROLLER_CONFIG

    props.update({k: v for k, v in overrides.items() if k in CONTROLLER_CONFIG.keys})
    return props


def auto_topic_defaults(num_brokers: int, overrides: dict[str, str] | None = None) -> dict[str, int]:
    """`num.partitions` and `default.replication.factor` of a `cluster up` of `num_brokers` brokers (see
    AUTO_TOPIC_PARTITIONS), `--override`s applied."""
    chosen = {
        "num.partitions": AUTO_TOPIC_PARTITIONS,
        "default.replication.factor": max(1, min(AUTO_TOPIC_REPLICATION_FACTOR, num_brokers)),
    }
    for key in chosen:
        if overrides and key in overrides:
            chosen[key] = int(overrides[key])
    return chosen


# Kafka's defaults are no limit on connections and 10 minutes of idleness; a laptop's process may open
# 1,024 files (256 on macOS), which a connection flood would use up before the broker's own segment files.
# One address may hold half of them, so a flood from one client leaves room for the rest (the brokers'
# own links come from their own addresses). `cluster up` sets these instead (`--override` changes them);
# a broker started alone keeps Kafka's.
LAPTOP_CONNECTION_LIMITS: dict[str, int] = {
    "max.connections": 1000,
    "max.connections.per.ip": 500,
    "connections.max.idle.ms": 300_000,
}


def broker_props(
    cluster_dir: Path,
    broker_id: int,
    port: int,
    voters: str,
    secret: str | None,
    overrides: dict[str, str],
    host: str = "127.0.0.1",
    kafka_port: int = 0,
    ack_journal: bool = False,
) -> dict[str, Any]:
    kafka = f",PLAINTEXT://{host}:{kafka_port}" if kafka_port else ""
    props: dict[str, Any] = {
        "broker.id": broker_id,
        "listeners": f"{host}:{port}{kafka}",
        "local.address": host,
        "log.dirs": str(cluster_dir / f"broker-{broker_id}" / "data"),
        "controller.quorum.voters": voters,
        "cluster.secret": secret,
        "metrics.dir": str(cluster_dir / "metrics"),
        "broker.heartbeat.interval.ms": 500,
        "broker.session.timeout.ms": 3000,
        "replica.lag.time.max.ms": 10000,
        "replica.fetch.backoff.ms": 200,
        **LAPTOP_CONNECTION_LIMITS,
    }
    if ack_journal:
        props["produce.ack.journal"] = str(cluster_dir / f"broker-{broker_id}" / ACK_JOURNAL_FILE)
    from broker.config import BROKER_CONFIG

    props.update({k: v for k, v in overrides.items() if k in BROKER_CONFIG.keys})
    return props


def ack_journal_path(info: ProcessInfo) -> Path | None:
    """The file broker `info` journals its acknowledged batches to (`produce.ack.journal` in its config file;
    `cluster up` writes it absolute), or None when it keeps no journal or its config cannot be read."""
    from broker.config import read_properties

    try:
        value = read_properties(Path(info.config)).get("produce.ack.journal")
    except ConfigError:
        return None
    return Path(value) if value else None


def check_overrides(overrides: dict[str, str]) -> None:
    """Refuse, before anything starts, an override that neither the controller nor a broker would accept.

    The launcher hands each process only the keys its kind knows, so without this check a typo would be
    dropped silently and the cluster would start with the default. The `MINIBROKER_*` environment
    variables the processes will inherit are checked the same way, so a bad one is refused here too,
    not by a controller that dies after it started.
    """
    from broker.config import BROKER_CONFIG, CONTROLLER_CONFIG, unknown_key_error
    from metrics.mqtt import parse_mqtt_url

    for definition in (CONTROLLER_CONFIG, BROKER_CONFIG):
        definition.from_env(os.environ)
    for name, value in overrides.items():
        kinds = [d for d in (CONTROLLER_CONFIG, BROKER_CONFIG) if name in d.keys]
        if not kinds:
            raise unknown_key_error(name, {*CONTROLLER_CONFIG.keys, *BROKER_CONFIG.keys}, "--override")
        for definition in kinds:
            definition.parse({name: value}, "--override")
    url = overrides.get("metrics.mqtt.url")
    if url:
        try:
            parse_mqtt_url(url)
        except ValueError as exc:
            raise ConfigError(f"metrics.mqtt.url: {exc}") from None


def check_ports_free(ports: dict[tuple[str, int], str]) -> None:
    """Raise PortInUseError naming the first (address, port) (and its role) something already listens on."""
    for (host, port), role in ports.items():
        with socket.socket() as s:
            # As the servers do (reuse_address): a port in TIME_WAIT is free, one with a listener is not.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError:
                raise PortInUseError(
                    f"port {port} on {host} ({role}) is already in use; pick another --base-port "
                    "(brokers use BASE, BASE+1, ..., the controllers BASE+100)"
                ) from None


def log_size(log_file: Path) -> int:
    try:
        return log_file.stat().st_size
    except FileNotFoundError:
        return 0


def _read_from(log_file: Path, offset: int) -> str:
    try:
        with open(log_file, "rb") as f:
            f.seek(offset)
            return f.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


async def wait_for_listening(log_file: Path, proc: Any, timeout_s: float, offset: int = 0) -> None:
    """Wait for the process's "listening" line, written after `offset` (logs are appended across restarts)."""
    from server_common.poll import wait_until
    from server_common.time import SYSTEM_TIME

    def listening() -> bool:
        text = _read_from(log_file, offset)
        if '"event": "listening"' in text:
            return True
        if proc.poll() is not None:
            raise ClusterError(
                f"process exited with status {proc.returncode} during start-up; log {log_file}:\n{text[-2000:]}"
            )
        return False

    if not await wait_until(listening, timeout_s, clock=SYSTEM_TIME):
        raise ClusterError(f"process did not start listening within {timeout_s}s; see {log_file}")


async def registered_brokers(host: str, port: int) -> set[int]:
    from network.connection import BrokerConnection
    from protocol.messages import MetadataRequest

    try:
        conn = await BrokerConnection.connect(host, port, "launcher", timeout_s=1.0)
    except (TimeoutError, OSError):
        return set()
    try:
        resp = await conn.send(MetadataRequest([]), timeout_s=2.0)
        return {b.broker_id for b in resp.brokers}
    except (TimeoutError, ConnectionError, OSError):
        return set()
    finally:
        await conn.close()


async def start_cluster(
    cluster_dir: Path,
    num_brokers: int = 3,
    base_port: int = 9092,
    controller_port: int | None = None,
    secret: str | None = None,
    overrides: dict[str, str] | None = None,
    timeout_s: float = 60.0,
    progress: Any = None,
    broker_ports: list[int] | None = None,
    base_address: str = DEFAULT_BASE_ADDRESS,
    kafka_ports: list[int] | None = None,
    num_controllers: int = 3,
    ack_journal: bool = False,
) -> LocalClusterState:
    """Start `num_controllers` controllers (the metadata quorum's voters, each on its own address, all on
    `controller_port`) and `num_brokers` brokers; return once every broker is registered and unfenced.

    Each broker also opens a Kafka-protocol listener (PLAINTEXT) on its host, at `kafka_ports[i]`, or
    `base_port + KAFKA_PORT_OFFSET + i` when `broker_ports` is not given either; none with
    `kafka_ports=[]` or when ports are given only for the msgpack listeners. With `ack_journal`, each broker
    journals the batches it acknowledges (`produce.ack.journal`, in its dir's ACK_JOURNAL_FILE): what a chaos
    verdict holds the cluster to."""
    from server_common.poll import wait_until
    from server_common.time import SYSTEM_TIME

    if num_controllers < 1:
        raise ClusterError("a cluster needs at least one controller")
    overrides = overrides or {}
    cluster_dir = cluster_dir.resolve()
    cluster_dir.mkdir(parents=True, exist_ok=True)
    existing = cluster_dir / STATE_FILE
    if existing.exists():
        try:
            state = LocalClusterState.load(cluster_dir)
        except (ClusterError, TypeError, KeyError):
            state = None  # a stale or foreign state file: nothing of ours is running
        alive = [node_pid(p) for p in state.nodes if node_alive(p)] if state else []
        if alive:
            raise ClusterError(
                f"a cluster is already running in {cluster_dir} (pids {alive}); "
                f"`minibroker cluster down --dir {shlex.quote(str(cluster_dir))}` first"
            )
    chosts, bhosts = node_addresses(base_address, num_brokers, num_controllers)
    cport = controller_port if controller_port is not None else base_port + 100
    wanted = {(host, cport): f"controller {FIRST_CONTROLLER_ID + i}" for i, host in enumerate(chosts)}
    if kafka_ports is None:
        kafka_ports = [] if broker_ports else [base_port + KAFKA_PORT_OFFSET + i for i in range(num_brokers)]
    for i in range(num_brokers):
        wanted.setdefault((bhosts[i], broker_ports[i] if broker_ports else base_port + i), f"broker {i + 1}")
        if i < len(kafka_ports):
            wanted.setdefault((bhosts[i], kafka_ports[i]), f"broker {i + 1}'s Kafka listener")
    check_ports_free(wanted)
    (cluster_dir / "metrics").mkdir(exist_ok=True)
    controllers = [
        ProcessInfo(
            "controller",
            FIRST_CONTROLLER_ID + i,
            host,
            cport,
            0,
            str(cluster_dir / f"controller-{FIRST_CONTROLLER_ID + i}"),
            str(cluster_dir / f"controller-{FIRST_CONTROLLER_ID + i}" / "controller.log"),
            str(cluster_dir / f"controller-{FIRST_CONTROLLER_ID + i}" / "controller.properties"),
        )
        for i, host in enumerate(chosts)
    ]
    voters = ",".join(f"{c.node_id}@{c.host}:{c.port}" for c in controllers)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        started: list[tuple[ProcessInfo, subprocess.Popen[bytes], int]] = []
        for info in controllers:
            Path(info.dir).mkdir(exist_ok=True)
            _write_properties(
                Path(info.config),
                controller_props(cluster_dir, info.node_id, cport, voters, secret, overrides, info.host, num_brokers),
            )
            offset = log_size(Path(info.log))
            proc = spawn("controller", Path(info.config), Path(info.log))
            procs.append(proc)
            info.pid = proc.pid
            started.append((info, proc, offset))
        for info, proc, offset in started:
            await wait_for_listening(Path(info.log), proc, timeout_s, offset)
            if progress:
                progress(f"controller {info.node_id} listening on {info.host}:{info.port} (pid {info.pid})")
        brokers = []
        started = []
        for i in range(num_brokers):
            broker_id = i + 1
            bdir = cluster_dir / f"broker-{broker_id}"
            bdir.mkdir(exist_ok=True)
            bconf = bdir / "broker.properties"
            port = broker_ports[i] if broker_ports else base_port + i
            kafka_port = kafka_ports[i] if i < len(kafka_ports) else 0
            _write_properties(
                bconf,
                broker_props(
                    cluster_dir, broker_id, port, voters, secret, overrides, bhosts[i], kafka_port, ack_journal
                ),
            )
            blog = bdir / "storage"
            offset = log_size(blog)
            bproc = spawn("broker", bconf, blog)
            procs.append(bproc)
            info = ProcessInfo(
                "broker", broker_id, bhosts[i], port, bproc.pid, str(bdir), str(blog), str(bconf), kafka_port
            )
            brokers.append(info)
            started.append((info, bproc, offset))
        for info, proc, offset in started:
            await wait_for_listening(Path(info.log), proc, timeout_s, offset)
            if progress:
                kafka = f", Kafka clients on {info.host}:{info.kafka_port}" if info.kafka_port else ""
                progress(f"broker {info.node_id} listening on {info.host}:{info.port}{kafka} (pid {info.pid})")
        want = {b.node_id for b in brokers}

        async def all_registered() -> bool:
            for c in controllers:
                if want <= await registered_brokers(c.host, c.port):
                    return True
            for info, proc, _ in started:
                if proc.poll() is not None:
                    raise ClusterError(f"broker {info.node_id} exited with status {proc.returncode}; see {info.log}")
            return False

        if not await wait_until(all_registered, timeout_s, clock=SYSTEM_TIME):
            raise ClusterError(f"brokers did not all register within {timeout_s}s; see the logs in {cluster_dir}")
        if progress:
            progress(f"all {num_brokers} brokers registered and unfenced; {num_controllers} controllers in the quorum")
        state = LocalClusterState(str(cluster_dir), controllers, brokers, str(cluster_dir / "metrics"), secret)
        state.save()
        (cluster_dir / BOOTSTRAP_FILE).write_text(state.bootstrap + "\n")
        kafka_file = cluster_dir / KAFKA_BOOTSTRAP_FILE
        if state.kafka_bootstrap:
            kafka_file.write_text(state.kafka_bootstrap + "\n")
        else:
            kafka_file.unlink(missing_ok=True)  # an earlier cluster's, in this dir: not this one's
        return state
    except BaseException:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        raise


def signal_process(pid: int, sig: int) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def wait_exit(pid: int, timeout_s: float) -> bool:
    # Not server_common.poll.wait_until: this one blocks (stop_cluster runs outside any event loop, from
    # `cluster down` and from finally blocks after the loop has ended), and that helper sleeps on an
    # event loop through the async Time.sleep.
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            done, _ = os.waitpid(pid, os.WNOHANG)
            if done == pid:
                return True
        if not pid_alive(pid):
            return True
        time.sleep(0.02)
    return False


def stop_process(pid: int, timeout_s: float = 15.0) -> str:
    if not pid_alive(pid):
        return "not running"
    signal_process(pid, signal.SIGTERM)
    signal_process(pid, signal.SIGCONT)  # a paused node handles SIGTERM only once it runs again
    if wait_exit(pid, timeout_s):
        return "stopped"
    signal_process(pid, signal.SIGKILL)
    wait_exit(pid, 5.0)
    return "killed"


def stop_cluster(state: LocalClusterState, timeout_s: float = 15.0) -> dict[str, str]:
    """SIGTERM every broker (they move leaderships away and exit), then the controllers."""
    result = {}
    pids = {b.node_id: node_pid(b) if node_alive(b) else -1 for b in state.brokers}
    for pid in pids.values():
        if pid > 0:
            signal_process(pid, signal.SIGTERM)
            signal_process(pid, signal.SIGCONT)  # a paused broker handles SIGTERM only once it runs again
    for broker_id, pid in pids.items():
        if pid <= 0:
            result[f"broker-{broker_id}"] = "not running"
        else:
            result[f"broker-{broker_id}"] = "stopped" if wait_exit(pid, timeout_s) else stop_process(pid, 1.0)
    for c in state.controllers:
        result[f"controller-{c.node_id}"] = stop_process(node_pid(c), timeout_s) if node_alive(c) else "not running"
    return result


async def restart_node(state: LocalClusterState, info: ProcessInfo, timeout_s: float = 30.0) -> ProcessInfo:
    """Start a node of the cluster that is not running (a broker or a controller) from its config, as
    `cluster up` did; return once it listens."""
    if node_alive(info):
        raise ClusterError(f"{info.role} {info.node_id} is still running (pid {node_pid(info)})")
    offset = log_size(Path(info.log))
    proc = spawn(info.role, Path(info.config), Path(info.log))
    info.pid = proc.pid
    state.save()
    await wait_for_listening(Path(info.log), proc, timeout_s, offset)
    return info


async def restart_broker(state: LocalClusterState, broker_id: int, timeout_s: float = 30.0) -> ProcessInfo:
    return await restart_node(state, state.broker(broker_id), timeout_s)


async def restart_controller(state: LocalClusterState, node_id: int, timeout_s: float = 30.0) -> ProcessInfo:
    return await restart_node(state, state.controller(node_id), timeout_s)


async def node_action(state: LocalClusterState, info: ProcessInfo, action: str) -> dict[str, Any]:
    """start | stop (SIGTERM: a broker's controlled shutdown, a controller's resignation) | kill (SIGKILL) |
    pause (SIGSTOP) | resume (SIGCONT), on one node of the cluster. The answer names the node by its role:
    {"broker": 2, ...} or {"controller": 3001, ...}."""
    alive = node_alive(info)
    pid = node_pid(info)
    role, node_id = info.role, info.node_id
    if action == "start":
        if alive:
            return {role: node_id, "pid": pid, "result": "already running"}
        info = await restart_node(state, info)
        return {role: node_id, "pid": info.pid, "result": "started"}
    if not alive:
        if action in ("pause", "resume"):
            raise ClusterError(f"{role} {node_id} is not running (last pid {pid})")
        return {role: node_id, "pid": pid, "result": "not running"}
    if action == "stop":
        return {role: node_id, "pid": pid, "result": stop_process(pid)}
    if action == "kill":
        signal_process(pid, signal.SIGKILL)
        wait_exit(pid, 5.0)
        return {role: node_id, "pid": pid, "result": "killed"}
    if action == "pause":
        signal_process(pid, signal.SIGSTOP)
        return {role: node_id, "pid": pid, "result": "paused"}
    if action == "resume":
        signal_process(pid, signal.SIGCONT)
        return {role: node_id, "pid": pid, "result": "resumed"}
    raise ValueError(f"unknown action {action!r}")


async def broker_action(state: LocalClusterState, broker_id: int, action: str) -> dict[str, Any]:
    return await node_action(state, state.broker(broker_id), action)
