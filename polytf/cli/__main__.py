"""``python -m polytf.cli``: the ``polytf`` command."""

import sys

from polytf.cli import main

sys.exit(main())
