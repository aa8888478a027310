"""Browser tests: the live dashboard in headless Chromium."""
