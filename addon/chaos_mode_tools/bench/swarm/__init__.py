"""The swarm benchmark: agents, their workload, the scenarios, the ideal bound, the run, its report."""
