"""A z.ai simulator (tornado; Anthropic and OpenAI doors) for end-to-end tests, the benchmarks and the demo:
``python -m chaos_mode_tools.sim --port 0``, or in-process ``SimServer`` (as a child process:
``chaos_mode_tools.devtools.sim_process``)."""

from chaos_mode_tools.sim.catalog import catalog_settings
from chaos_mode_tools.sim.errors import error_body
from chaos_mode_tools.sim.lengths import Lengths
from chaos_mode_tools.sim.limits import LimitChange, ScheduledChange
from chaos_mode_tools.sim.server import SimServer
from chaos_mode_tools.sim.settings import SimSettings, default_limits
from chaos_mode_tools.sim.state import Fault, SimState

__all__ = [
    "Fault",
    "Lengths",
    "LimitChange",
    "ScheduledChange",
    "SimServer",
    "SimSettings",
    "SimState",
    "catalog_settings",
    "default_limits",
    "error_body",
]
