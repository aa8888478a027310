"""The script mitmproxy loads: `chaos-mode` loads it, or `mitmdump -s "$(python -m chaos_mode path)"`.

mitmproxy runs it again when the file changes; each run makes a fresh addon.
"""

import logging
import sys
from pathlib import Path

try:
    import chaos_mode  # noqa: F401  (installed: pip, pipx, `pip install -e .`)
except ImportError:  # a plain checkout: the package is two folders up
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mitmproxy.version import VERSION

from chaos_mode.mitm.dependencies import install_hint, missing_package, versions_hint

# One line instead of mitmproxy's traceback; an error at start-up makes mitmdump exit.
addons: list[object] = []
if (too_old := versions_hint(sys.version_info[:3], VERSION)) is not None:  # an older mitmdump took the script
    logging.getLogger("chaos_mode").error(too_old)
else:
    try:
        from chaos_mode.mitm.addon import ChaosMode
    except ModuleNotFoundError as exc:  # mitmproxy installed on its own (pipx, brew, the binary)
        package = missing_package(exc)
        if package is None:
            raise
        logging.getLogger("chaos_mode").error(install_hint(package))
    else:
        addons = [ChaosMode()]
