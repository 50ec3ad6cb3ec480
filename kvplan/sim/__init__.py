"""Simulated mode: the step-time runner over the target GPU's roofline, and clusters of
engines behind routers. Never imports torch."""
