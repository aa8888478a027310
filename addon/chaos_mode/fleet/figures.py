"""This proxy in a fleet, as the status page and the metrics show it (no Redis needed to read it)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class FleetFigures:
    """This proxy in the fleet that shares its account through Redis (`chaos_state`)."""

    connected: bool  # Redis answers and slots are counted fleet-wide; False: serving alone on a share
    proxies: int  # live proxies at the last tally, this one included (0 while alone)
    own_in_flight: int  # slots this proxy holds (the pool's in-flight counts the fleet's)
    outages: int  # times Redis went away
    lost_races: int  # slots taken on the mirror that Redis refused (another proxy took them first)
