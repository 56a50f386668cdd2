"""``python -m nbmq.cli ...``: the ``nbmq`` command without its console script."""

import sys

from . import main

sys.exit(main())
