"""The quota benchmarks: the 5-hour prompt quota (`quota.prompts`) and the credit plan (`quota.credits`)."""
