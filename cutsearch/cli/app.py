"""The `cutsearch` Typer app and its entry point; each command lives in a sibling module.

User mistakes (UserError) become one line on stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import re
import sys
import typer
from rich.console import Console

from cutsearch.errors import UserError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Find a faster CUTLASS kernel for one fully-connected layer on a Hopper GPU.")
err = Console(stderr=True)
out = Console()


@app.callback()
def _root() -> None:
    """Find a faster CUTLASS kernel for one fully-connected layer on a Hopper GPU."""


def parse_duration(text: str | None) -> float | None:
    """'90s', '15m', '1h', '1h30m' or plain seconds."""
    if text is None:
        return None
    parts = re.fullmatch(r"\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?\s*", text)
    if not text.strip() or not parts or not any(parts.groups()):
        raise UserError(f"cannot read duration {text!r}: use e.g. 90s, 15m or 1h")
    h, m, s = (float(g) if g else 0.0 for g in parts.groups())
    seconds = h * 3600 + m * 60 + s
    if seconds <= 0:
        raise UserError(f"duration {text!r} must be positive")
    return seconds


def main() -> None:
    import cutsearch.cli  # noqa: F401 - registers the commands

    try:
        app(standalone_mode=False)
    except UserError as exc:
        # One line, never wrapped: scripts grep it and people read it.
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        err.print("interrupted: finished trials are saved; run the same command to resume")
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(1)
    except Exception as exc:  # noqa: BLE001 - usage errors from click, or typer's vendored click
        # Typer ships its own copy of click, so match the class by name along the MRO.
        if any(c.__name__ == "ClickException" for c in type(exc).__mro__):
            # One line, like a UserError, rather than click's usage block.
            print(f"error: {' '.join(exc.format_message().split())} (see --help)", file=sys.stderr)
            sys.exit(getattr(exc, "exit_code", 2))
        raise
