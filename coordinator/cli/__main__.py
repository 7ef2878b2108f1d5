"""``python -m coordinator.cli``: the ``tiresias`` command."""

import sys

from coordinator.cli import main

sys.exit(main())
