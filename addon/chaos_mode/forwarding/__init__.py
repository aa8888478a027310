"""The forwarder: the loopback server mitmproxy sends routed flows to, and the HTTP/1.1 client to z.ai."""
