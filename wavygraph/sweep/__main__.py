"""``python -m wavygraph.sweep ...``: the same as ``wavygraph sweep ...``."""
import sys

from wavygraph.sweep.cli import main

sys.exit(main())
