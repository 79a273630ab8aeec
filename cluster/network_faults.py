"""Network faults between the nodes of a local cluster: iptables DROP rules and tc netem, on loopback only.

How this works
--------------
Every node of a local cluster has its own address in 127.0.0.0/8 and opens its links from it
(cluster/local_cluster.py), so one link is one (source, destination) address pair.

* Cuts are iptables rules `-s A -d B -j DROP` in a chain of our own, `MBCHAOS-<tag>`, where the tag is
  derived from the cluster directory; one jump rule from INPUT, itself limited to 127.0.0.0/8, sends
  loopback traffic through it. A cut is one-way (A's packets to B are dropped; TCP then stalls both ways
  on that connection, as on a real network) or both ways.
* Lossy links are iptables rules too (`-m statistic --mode random --probability p -j DROP`).
* Slow links are tc on `lo`: a root `htb` qdisc whose default class passes everything unlimited, a
  second class with netem under it, and u32 filters that send exactly the chosen (source, destination)
  pairs there. Every other packet keeps going undelayed. A kernel without sch_netem gets a bandwidth
  cap on that class instead, and the run reports which it was. The root's handle is derived from the
  tag, so a run knows its own qdisc and never removes another's; while another's is installed, delay is
  refused.
* `remove()` deletes the jump, the chain and our qdisc, whatever is left of them; it runs on normal exit,
  on error, on Ctrl-C/SIGTERM (the chaos command's finally) and from `minibroker chaos heal --dir D`.
  Every address handed in is checked to lie in 127.0.0.0/8 before any command runs.
"""

from __future__ import annotations

import hashlib
import ipaddress
import os
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path

LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
CHAIN_PREFIX = "MBCHAOS-"
DEVICE = "lo"
NETEM_BAND = 4  # class 1 takes all traffic by default; class 4 is reached only through our filters
UNLIMITED = ["htb", "rate", "100gbit", "burst", "16mb", "cburst", "16mb", "quantum", "60000"]
SLOW_LINK = ["htb", "rate", "256kbit", "ceil", "256kbit", "burst", "1600", "cburst", "1600"]


class FaultToolsMissing(RuntimeError):
    """iptables or tc is missing, or we are not root: the network faults cannot run here."""


class NetworkFaultError(RuntimeError):
    pass


def check_tools() -> None:
    missing = [tool for tool in ("iptables", "tc") if shutil.which(tool) is None]
    if missing:
        raise FaultToolsMissing(
            f"network faults need {' and '.join(missing)} (apt-get install iptables iproute2; "
            "scripts/test.sh installs them)"
        )
    if os.geteuid() != 0:
        raise FaultToolsMissing("network faults need root (iptables and tc change the host's network)")


def loopback(address: str) -> str:
    """The address, if it is in 127.0.0.0/8; anything else is refused before a rule is written."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        raise NetworkFaultError(f"{address!r} is not an IPv4 address") from None
    if ip not in LOOPBACK:
        raise NetworkFaultError(f"{address} is outside 127.0.0.0/8; chaos only touches loopback addresses")
    return str(ip)


def tag_of(cluster_dir: Path) -> str:
    return hashlib.sha256(str(cluster_dir.resolve()).encode()).hexdigest()[:8]


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(list(args), capture_output=True, text=True, timeout=10)
    if check and result.returncode != 0:
        raise NetworkFaultError(f"`{' '.join(args)}` failed: {result.stderr.strip() or result.stdout.strip()}")
    return result


class NetworkFaults:
    def __init__(self, cluster_dir: Path) -> None:
        self.tag = tag_of(cluster_dir)
        self.chain = CHAIN_PREFIX + self.tag
        # tc handles are 16-bit hex majors; 0x8000.. keeps clear of small hand-made ones.
        self.handle = f"{0x8000 + int(self.tag[:4], 16) % 0x7FFF:x}"
        self._chain_ready = False
        self._qdisc_ready = False

    # -- iptables -------------------------------------------------------------------------------------

    def _jump(self) -> list[str]:
        return ["INPUT", "-s", str(LOOPBACK), "-d", str(LOOPBACK), "-j", self.chain]

    def _ensure_chain(self) -> None:
        if self._chain_ready:
            return
        check_tools()
        if _run("iptables", "-n", "-L", self.chain, check=False).returncode != 0:
            _run("iptables", "-N", self.chain)
        if _run("iptables", "-C", *self._jump(), check=False).returncode != 0:
            _run("iptables", "-I", *self._jump())
        self._chain_ready = True

    def cut(self, pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """Drop every packet from A to B for each (A, B): a one-way cut per pair."""
        checked = [(loopback(a), loopback(b)) for a, b in pairs]
        self._ensure_chain()
        for a, b in checked:
            _run("iptables", "-A", self.chain, "-s", f"{a}/32", "-d", f"{b}/32", "-j", "DROP")
        return checked

    def heal_cuts(self) -> None:
        if _run("iptables", "-n", "-L", self.chain, check=False).returncode == 0:
            _run("iptables", "-F", self.chain)

    # -- tc: delay on chosen links ----------------------------------------------------------------------

    def _root_handle(self) -> str | None:
        out = _run("tc", "qdisc", "show", "dev", DEVICE).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0] == "qdisc" and "root" in parts:
                return None if parts[1] in ("noqueue", "pfifo_fast", "fq_codel") else parts[2].rstrip(":")
        return None

    def _ensure_qdisc(self) -> None:
        if self._qdisc_ready:
            return
        check_tools()
        root = self._root_handle()
        if root is not None and root != self.handle:
            raise NetworkFaultError(
                f"{DEVICE} already has a root qdisc ({root}:) that is not ours; delay needs {DEVICE}'s root "
                "to itself (another chaos run? see `tc qdisc show dev lo`)"
            )
        if root is None:
            h = self.handle
            _run("tc", "qdisc", "add", "dev", DEVICE, "root", "handle", f"{h}:", "htb", "default", "1")
            # Everything not filtered to our band keeps going as fast as loopback goes.
            _run("tc", "class", "add", "dev", DEVICE, "parent", f"{h}:", "classid", f"{h}:1", *UNLIMITED)
        self._qdisc_ready = True

    def delay(self, pairs: Iterable[tuple[str, str]], delay_ms: int, jitter_ms: int = 0) -> str:
        """Delay (± jitter) every packet from A to B, for each (A, B), with netem under an htb class that
        only our u32 filters reach. A kernel without sch_netem gets a bandwidth cap on those pairs instead
        (a slow link, not a fixed delay); the returned text says which one was installed."""
        checked = [(loopback(a), loopback(b)) for a, b in pairs]
        self._ensure_qdisc()
        h = self.handle
        band = f"{h}:{NETEM_BAND}"
        netem = ["delay", f"{delay_ms}ms"] + ([f"{jitter_ms}ms", "distribution", "normal"] if jitter_ms else [])
        _run("tc", "class", "replace", "dev", DEVICE, "parent", f"{h}:", "classid", band, *UNLIMITED)
        added = _run(
            "tc", "qdisc", "replace", "dev", DEVICE, "parent", band, "handle", "10:", "netem", *netem, check=False
        )
        if added.returncode == 0:
            how = f"netem delay {delay_ms}ms ± {jitter_ms}ms"
        else:
            _run("tc", "class", "replace", "dev", DEVICE, "parent", f"{h}:", "classid", band, *SLOW_LINK)
            how = f"htb {SLOW_LINK[2]} cap (this kernel has no sch_netem: {added.stderr.strip()})"
        for a, b in checked:
            _run(
                *("tc", "filter", "add", "dev", DEVICE, "parent", f"{h}:", "protocol", "ip", "prio", "1"),
                *("u32", "match", "ip", "src", f"{a}/32", "match", "ip", "dst", f"{b}/32", "flowid", band),
            )
        return how

    def loss(self, pairs: Iterable[tuple[str, str]], loss_percent: float) -> str:
        """Drop `loss_percent` of the packets from A to B at random (iptables' statistic match: no netem
        needed), for each (A, B)."""
        checked = [(loopback(a), loopback(b)) for a, b in pairs]
        self._ensure_chain()
        for a, b in checked:
            _run(
                *("iptables", "-A", self.chain, "-s", f"{a}/32", "-d", f"{b}/32"),
                *("-m", "statistic", "--mode", "random", "--probability", f"{loss_percent / 100:.4f}", "-j", "DROP"),
            )
        return f"iptables random drop {loss_percent}%"

    def heal_links(self) -> None:
        if self._root_handle() == self.handle:
            _run("tc", "qdisc", "del", "dev", DEVICE, "root", check=False)
        self._qdisc_ready = False

    # -- all of it ------------------------------------------------------------------------------------

    def heal(self) -> None:
        """Undo every fault but keep the (empty) chain for the next one."""
        self.heal_cuts()
        self.heal_links()

    def remove(self) -> None:
        """Remove everything of ours from iptables and tc; safe to call at any time, any number of times."""
        if shutil.which("iptables") is not None:
            while _run("iptables", "-D", *self._jump(), check=False).returncode == 0:
                pass
            _run("iptables", "-F", self.chain, check=False)
            _run("iptables", "-X", self.chain, check=False)
        if shutil.which("tc") is not None and self._root_handle() == self.handle:
            _run("tc", "qdisc", "del", "dev", DEVICE, "root", check=False)
        self._chain_ready = False
        self._qdisc_ready = False


def leftovers() -> list[str]:
    """Whatever of any chaos run is still installed (a test fixture checks this is empty)."""
    found = []
    if shutil.which("iptables") is not None:
        found += [line for line in _run("iptables", "-S", check=False).stdout.splitlines() if CHAIN_PREFIX in line]
    if shutil.which("tc") is not None:
        for line in _run("tc", "qdisc", "show", "dev", DEVICE, check=False).stdout.splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[1] in ("htb", "prio", "netem"):
                major = int(parts[2].rstrip(":").split(":")[0] or "0", 16)
                if major >= 0x8000 or parts[1] == "netem":
                    found.append(line)
    return found
