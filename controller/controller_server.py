"""The controller process: a `ControllerNode` (controller/controller_node.py) behind a socket server, with
TCP links to the other voters of the quorum at the addresses `controller.quorum.voters` gives."""

from __future__ import annotations

import json
from typing import Any

from controller.controller_node import ControllerNode, quorum_config
from network.socket_server import SocketServer, wait_for_termination
from network.tcp_transport import TcpTransport
from server_common.config import parse_host_port
from server_common.time import SYSTEM_TIME, Time


class ControllerServer:
    def __init__(self, config: dict[str, Any], time: Time = SYSTEM_TIME) -> None:
        self.config = config
        voters = quorum_config(config).voters
        transport = TcpTransport(
            voters.get,
            f"controller-{config['node.id']}",
            config.get("cluster.secret"),
            timeout_ms=5000,
            describe=lambda node_id: f"controller {node_id}",
            local_address=config.get("local.address"),
        )
        self.node = ControllerNode(config, time, transport)
        host, port = parse_host_port(config["listeners"], "listeners")
        self.server = SocketServer.from_config(self.node.handle, host, port, config)

    async def start(self) -> None:
        await self.server.start()
        self.node.start()
        print(
            json.dumps(
                {
                    "event": "listening",
                    "controller_id": self.node.node_id,
                    "host": self.server.host,
                    "port": self.server.port,
                    "voters": sorted(self.node.quorum.voters),
                }
            ),
            flush=True,
        )

    async def shutdown(self) -> None:
        await self.server.close()
        await self.node.stop(graceful=True)


async def run_controller(config: dict[str, Any]) -> None:
    server = ControllerServer(config)
    await server.start()
    await wait_for_termination()
    await server.shutdown()
