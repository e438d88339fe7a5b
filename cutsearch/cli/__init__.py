"""The command line: a thin layer over the library, one module per group of commands."""

from cutsearch.cli import search, study, worker  # noqa: F401 - each module registers its commands
from cutsearch.cli.app import app, main

__all__ = ["app", "main"]
