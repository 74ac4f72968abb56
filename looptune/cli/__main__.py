"""`python -m looptune.cli` runs the looptune command."""
import sys

from . import main

sys.exit(main())
