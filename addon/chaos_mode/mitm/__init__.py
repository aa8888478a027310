"""The mitmproxy adapter: the addon and its flow helpers, the only modules that import mitmproxy."""
