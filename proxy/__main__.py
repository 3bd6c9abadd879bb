import sys

from insync_proxy.cli import main

sys.exit(main())
