"""spark-submit entry point for the batch durability report.

    spark-submit --master local[2] pipeline/report_job.py --input 'audit/**/*.jsonl' --output out/

spark-submit runs this file as a script, so the repository root (the parent of ``pipeline/``) is put
on ``sys.path`` when the package is not installed; on a cluster ship the package with
``--py-files`` (e.g. a zip of ``pipeline/``) or install ``insync-proxy[pipeline]`` on the nodes.
The master comes from spark-submit unless ``--master`` is given here too.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import insync_proxy.pipeline.report  # noqa: F401 - import check only
except ImportError:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from insync_proxy.pipeline.report import main  # noqa: E402 - after the sys.path fix above

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
