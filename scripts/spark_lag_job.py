"""spark-submit entry for the lag job: the same flags as `minibroker dashboard`.

    spark-submit --master spark://host:7077 scripts/spark_lag_job.py --metrics DIR --out DIR

Run from the repository root (or with the project installed) so the `lagapp` and `metrics` packages import.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lagapp.spark_app import main  # noqa: E402  (the path above must come first)

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
