"""The command line: app.py wires one module per command group."""
