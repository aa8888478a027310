"""``python -m chaos_mode.check``: the same as ``chaos-mode check``."""

import sys

from chaos_mode.check.run import main

sys.exit(main())
