"""``python -m wavygraph`` runs the ``wavygraph`` command."""
import sys

from wavygraph.cli import main

sys.exit(main())
