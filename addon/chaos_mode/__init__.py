"""Chaos Mode: one concurrency pool over the whole z.ai GLM catalog.

Everything in this package except :mod:`chaos_mode.mitm.addon` is pure Python and knows nothing of mitmproxy.
"""

__version__ = "0.1.0"
