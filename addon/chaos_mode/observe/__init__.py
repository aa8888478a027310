"""What is seen of the pool: request stats, Prometheus metrics, the web server and dashboard, the text
panel."""
