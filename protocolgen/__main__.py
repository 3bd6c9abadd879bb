"""``python -m protocolgen``: see protocolgen/generate.py."""

import sys

from .generate import main

sys.exit(main())
