"""Development tools: child processes for tests and benchmarks, the flow recorder (never imported by the
runtime)."""
