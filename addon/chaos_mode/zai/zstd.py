"""zstd: the standard library's (Python 3.14) or its backport, which mitmproxy itself depends on."""

from __future__ import annotations

try:
    from compression import zstd  # type: ignore[import-not-found,unused-ignore]
except ImportError:
    from backports import zstd  # type: ignore[import-not-found,no-redef,unused-ignore]

__all__ = ["zstd"]
