"""httpx, the development tools' HTTP client (the `tools` extra; the addon never needs it): one line instead
of a traceback when it is missing. Tools that need it import it from here."""

try:
    import httpx as httpx
except ModuleNotFoundError:  # pragma: no cover - the test environment has it
    raise SystemExit(
        "this chaos-mode tool needs httpx, the development tools' client: pip install -e '.[tools]' "
        "(or pip install httpx)"
    ) from None
