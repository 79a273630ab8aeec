"""What every process's configuration shares: the error a bad value raises, and listener addresses."""

from __future__ import annotations


class ConfigError(ValueError):
    pass


def parse_host_port(value: str, what: str = "address") -> tuple[str, int]:
    text = value.strip()
    if "://" in text:
        text = text.split("://", 1)[1]
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ConfigError(f"{what}: expected host:port, got {value!r}")
    return host, int(port)
