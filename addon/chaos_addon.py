"""mitmproxy entry point: `mitmdump -s addon/chaos_addon.py`."""

import logging
import sys
from pathlib import Path

try:
    import chaos_mode  # noqa: F401  (installed with `pip install -e .`)
except ImportError:  # a plain checkout: the package sits beside this script
    sys.path.insert(0, str(Path(__file__).resolve().parent))

try:
    from chaos_mode.mitm.addon import ChaosMode
except ModuleNotFoundError as exc:  # mitmproxy installed on its own (pipx, brew, the binary)
    from chaos_mode.mitm.dependencies import install_hint, missing_package

    package = missing_package(exc)
    if package is None:
        raise
    # One line instead of mitmproxy's traceback; an error at start-up makes mitmdump exit.
    logging.getLogger("chaos_mode").error(install_hint(package))
    addons: list[object] = []
else:
    addons = [ChaosMode()]
