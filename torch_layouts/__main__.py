"""``python -m torch_layouts``: see :mod:`torch_layouts.cli`."""

import sys

from .cli import main

sys.exit(main())
