"""``python -m stepwatch.collector.tools``: the ``stepwatch`` command."""

import sys

from . import main

sys.exit(main())
