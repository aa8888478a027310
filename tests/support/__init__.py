"""Helpers the tests share: fake clocks, the design's catalog as the tests state it, JSON bodies,
certificates, Redis processes."""
