"""Learned concurrency limits: the estimator, and the file that keeps them across restarts."""
