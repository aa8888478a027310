"""`python -m chaos_mode`: the `chaos-mode` command (`path`: the script mitmproxy loads)."""

import sys

from chaos_mode.mitm.command import main

sys.exit(main())
