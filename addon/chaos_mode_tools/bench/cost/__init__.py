"""What the addon costs: time and CPU instructions per request, z.ai at a distance, a failover's first
token, the pool's and the learner's hot paths."""
