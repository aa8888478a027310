"""`chaos-mode check`: what z.ai does on the user's own account (names routed, alias counters, heads),
measured in a few dozen requests with the user's key; a user command apart from the addon."""
