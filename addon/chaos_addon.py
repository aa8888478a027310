"""A checkout's entry point, `mitmdump -s addon/chaos_addon.py`: runs the package's script afresh."""

import runpy
from pathlib import Path

addons = runpy.run_path(str(Path(__file__).resolve().parent / "chaos_mode" / "mitm" / "script.py"))["addons"]
