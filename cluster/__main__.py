import sys

from cluster.cli import main

sys.exit(main())
