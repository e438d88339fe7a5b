"""cutsearch: search, measure and export the fastest CUTLASS kernel for one FC layer."""

from cutsearch.errors import UserError
from cutsearch.export import export
from cutsearch.loader import load
from cutsearch.problem import Layer
from cutsearch.space import Config, Knobs, Space
from cutsearch.tuner import summary, tune

__all__ = ["Config", "Knobs", "Layer", "Space", "UserError", "export", "load", "summary", "tune"]
__version__ = "0.1.0"
