"""What client commands raise when they cannot go on; the CLI maps each to an exit code in one place
(cluster/cli/app.py).

The client library knows nothing of exit codes: `ClusterUnreachableError` means no broker could be
reached (exit 3), `ClusterAnswerError` that the cluster answered with something the command cannot get
past, such as an unknown topic (exit 4).
"""

from __future__ import annotations


class ClientCommandError(Exception):
    """A client command cannot go on; the message says why, in words for the user."""


class ClusterUnreachableError(ClientCommandError):
    """No broker (or controller) could be reached."""


class ClusterAnswerError(ClientCommandError):
    """The cluster answered, with an error the command cannot get past."""


class ClusterUnavailableError(ConnectionError):
    """No broker of the cluster answered (``client.cluster_client`` raises it). Defined here, with the
    other errors, so the CLI can name it without importing the client."""
