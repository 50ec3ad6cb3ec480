"""Where independent runs execute: this machine's process pool (workers that never outlive
their run) or a Ray cluster driven from a child process. Imports only kvplan.spec."""
