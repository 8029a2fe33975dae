"""`python -m mysql_operator`: the command line (`cli.main`)."""

import sys

from .cli.main import main

sys.exit(main())
