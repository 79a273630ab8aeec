"""A node's listeners, configured with Kafka's keys: `listeners`, `advertised.listeners`,
`listener.security.protocol.map` and `inter.broker.listener.name`.

`listeners` is a comma-separated list of `NAME://host:port`. The listener named by
`inter.broker.listener.name` (MINIBROKER unless set) speaks minibroker's msgpack protocol
(docs/protocol.md): brokers replicate over it, the controller and the CLI use it. An entry without a
name is that listener, so `listeners=127.0.0.1:9092` means what it always did. Every other listener
speaks Kafka's binary protocol (docs/kafka-protocol.md) for Kafka clients and tools, with the security
protocol `listener.security.protocol.map` gives its name (a name that is itself a security protocol
maps to it, as in Kafka). PLAINTEXT and SASL_PLAINTEXT (mechanism PLAIN, the password being
`cluster.secret`) are served.

`advertised.listeners` has the same form and says how other nodes and clients reach each listener; a
listener it does not name is advertised at its bound address (with the port it got, for port 0).
"""

from __future__ import annotations

from dataclasses import dataclass

MSGPACK_LISTENER = "MINIBROKER"
SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
SERVED_SECURITY_PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT")


class ListenerError(ValueError):
    """A listener setting that cannot be used; the message names the key and the value."""


@dataclass(frozen=True, slots=True)
class Listener:
    name: str
    host: str
    port: int
    security_protocol: str = "PLAINTEXT"

    @property
    def is_msgpack(self) -> bool:
        return self.name == MSGPACK_LISTENER

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def split_host_port(text: str, what: str) -> tuple[str, int]:
    host, sep, port = text.strip().rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not sep or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ListenerError(f"{what}: expected host:port, got {text.strip()!r}")
    return host, int(port)


def parse_protocol_map(value: str | None) -> dict[str, str]:
    """`listener.security.protocol.map`: NAME:PROTOCOL pairs, comma-separated."""
    mapping = {MSGPACK_LISTENER: "PLAINTEXT"}
    for entry in (value or "").split(","):
        if not entry.strip():
            continue
        name, sep, protocol = entry.strip().partition(":")
        if not sep or not name or protocol.upper() not in SECURITY_PROTOCOLS:
            raise ListenerError(
                f"listener.security.protocol.map: {entry.strip()!r} is not NAME:PROTOCOL "
                f"with PROTOCOL one of {', '.join(SECURITY_PROTOCOLS)}"
            )
        mapping[name.upper()] = protocol.upper()
    return mapping


def parse_listeners(
    value: str,
    protocol_map: str | None = None,
    inter_broker_listener_name: str = MSGPACK_LISTENER,
    key: str = "listeners",
) -> list[Listener]:
    """The listeners of `value`, msgpack one first. Raises ListenerError naming what is wrong."""
    mapping = parse_protocol_map(protocol_map)
    inter = inter_broker_listener_name.upper()
    listeners: list[Listener] = []
    for entry in value.split(","):
        if not entry.strip():
            continue
        name, sep, rest = entry.strip().partition("://")
        if not sep:
            name, rest = inter, entry
        name = name.upper()
        host, port = split_host_port(rest, f"{key} {entry.strip()!r}")
        if name == inter:
            listeners.append(Listener(MSGPACK_LISTENER, host, port, "PLAINTEXT"))
            continue
        protocol = mapping.get(name, name if name in SECURITY_PROTOCOLS else "")
        if not protocol:
            raise ListenerError(
                f"{key}: listener {name} has no security protocol: name one of {', '.join(SECURITY_PROTOCOLS)} "
                "or map it in listener.security.protocol.map"
            )
        if protocol not in SERVED_SECURITY_PROTOCOLS:
            raise ListenerError(
                f"{key}: listener {name} uses {protocol}; minibroker serves {' and '.join(SERVED_SECURITY_PROTOCOLS)}"
            )
        listeners.append(Listener(name, host, port, protocol))
    names = [listener.name for listener in listeners]
    if len(set(names)) != len(names):
        raise ListenerError(f"{key}: each listener name may appear once, got {', '.join(names)}")
    if MSGPACK_LISTENER not in names and key == "listeners":
        raise ListenerError(
            f"{key}: no {inter} listener (minibroker's own protocol, which brokers replicate over); "
            f"add {inter}://host:port or a bare host:port"
        )
    listeners.sort(key=lambda listener: not listener.is_msgpack)
    return listeners
