"""`python -m insync_proxy ...` is the `insync-proxy` command."""

import sys

from insync_proxy.cli import main

sys.exit(main())
