"""The command line: a thin layer over the library, one module per group of commands."""

from cutsearch.cli import economy, profile, search, study, suite, worker  # noqa: F401 - each registers its commands
from cutsearch.cli.app import app, main

__all__ = ["app", "main"]
