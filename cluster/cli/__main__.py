"""`python -m cluster.cli`, as `minibroker` (bench/ and the compose test start nodes this way)."""

import sys

from cluster.cli import main

sys.exit(main())
