"""`python -m insync_proxy ...` is the `insync-proxy` command; spark-submit runs this file as its script
(`spark-submit --master yarn insync_proxy/__main__.py report ...`), the same command line."""

import sys
from pathlib import Path

if not __package__:
    # Run as a file (spark-submit): its folder, not the checkout, is on sys.path. Without an installed package
    # the checkout's root is added, as `python -m` from the checkout would have it.
    try:
        import insync_proxy  # noqa: F401 - import check only
    except ImportError:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from insync_proxy.cli import main  # noqa: E402 - after the sys.path fix above

sys.exit(main())
