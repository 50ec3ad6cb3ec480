"""Package discovery: every package under kvplan/, plus kernels/kvplan_kernels/ and profiles/
installed as kvplan.kernels and kvplan.profiles_data (their folders are mapped in
pyproject.toml)."""

from setuptools import find_packages, setup

setup(
    packages=[
        *find_packages(include=["kvplan", "kvplan.*"]),
        "kvplan.kernels",
        "kvplan.profiles_data",
    ]
)
