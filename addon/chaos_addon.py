"""mitmproxy entry point: `mitmdump -s addon/chaos_addon.py`."""

import sys
from pathlib import Path

try:
    import chaos_mode  # noqa: F401  (installed with `pip install -e .`)
except ImportError:  # a plain checkout: the package sits beside this script
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from chaos_mode.addon import ChaosMode

addons = [ChaosMode()]
