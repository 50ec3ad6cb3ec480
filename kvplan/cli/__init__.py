from kvplan.cli.app import app

__all__ = ["app"]
