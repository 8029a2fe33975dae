"""`python -m mysql_operator.manifests [--check]`: see `generate`."""

import sys

from .generate import main

sys.exit(main())
