"""Chaos Mode: one concurrency pool over the whole z.ai GLM catalog.

Only the adapter, `mitm/`, imports mitmproxy; everything else is pure Python and knows nothing of it.
"""

__version__ = "0.1.0"
