"""python -m fai.bench (see the package's docstring)."""
import sys

from ._cli import main

sys.exit(main())
