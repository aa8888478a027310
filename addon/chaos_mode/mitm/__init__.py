"""The mitmproxy adapter: the addon, its script and command, its flow helpers; the only modules that
import mitmproxy."""
