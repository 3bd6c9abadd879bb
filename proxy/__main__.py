import sys

from insync_proxy.proxy.cli import main

sys.exit(main())
