"""Test rigs: child processes (the simulator, mitmdump, Redis), certificates, a port at a distance, the
flow recorder."""
