"""The exit codes of `minibroker` (documented in README.md), for the CLI and the chaos commands alike.

0  success
1  the command ran but its check failed (chaos verdict invalid; consume --fail-on-timeout found fewer
   records than --max-messages; topic reassign --verify while partitions still move)
2  bad usage: unknown flag, bad value, bad config key, a port already in use, a malformed input line
3  the cluster is not reachable / not running
4  the cluster answered with an error (unknown topic, topic exists, not enough brokers, ...)
5  chaos: the cluster's verdict is valid, but the chaos load's client claimed records delivered that no
   broker acknowledged (by the brokers' produce.ack.journal): the client's bug, which a script should see
   and not take for the cluster's
"""

EXIT_OK = 0
EXIT_CHECK_FAILED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3
EXIT_CLUSTER_ERROR = 4
EXIT_CLIENT_CLAIMS = 5
EXIT_INTERRUPTED = 130  # Ctrl-C or SIGTERM, as a shell reports a process ended by SIGINT
