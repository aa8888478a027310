"""The soak: thousands of requests with a fault mix through a real mitmdump, and what they left behind."""
