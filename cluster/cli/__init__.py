"""`minibroker`: one entry point for running processes, local clusters, topics, data, chaos and metrics.

One module per command family (broker, cluster, topic, configs, produce_consume, chaos, tools), each with a
`register` that adds its parsers; app.py builds the parser and holds `main`, the one place that maps what
a command raises to an exit code (cluster/exit_codes.py).
"""

from cluster.cli.app import build_parser, main
from cluster.cli.cluster import _describe_up
from cluster.cli.common import CliError
from cluster.exit_codes import EXIT_CHECK_FAILED, EXIT_CLUSTER_ERROR, EXIT_OK, EXIT_UNREACHABLE, EXIT_USAGE

__all__ = [
    "EXIT_CHECK_FAILED",
    "EXIT_CLUSTER_ERROR",
    "EXIT_OK",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "CliError",
    "_describe_up",
    "build_parser",
    "main",
]
