"""The `cutsearch` Typer app and its entry point; each command lives in a sibling module.

User mistakes (UserError) become one line on stderr and exit code 2, never a traceback.
SIGTERM and SIGHUP stop a command as Ctrl-C does, so that its cleanup runs (no nvcc outlives it).
"""

from __future__ import annotations

import re
import shlex
import signal
import sys

import typer
from rich.console import Console

from cutsearch.errors import UserError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="Find a faster CUTLASS kernel for one fully-connected layer on a Hopper GPU.")
err = Console(stderr=True)
out = Console()


def _version(value: bool) -> None:
    if value:
        import importlib.metadata

        try:
            print(f"cutsearch {importlib.metadata.version('cutsearch')}")
        except importlib.metadata.PackageNotFoundError:  # run from a checkout, not installed
            print("cutsearch (not installed)")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print the version and exit.")) -> None:
    """Find a faster CUTLASS kernel for one fully-connected layer on a Hopper GPU."""


def invocation() -> str:
    """The command line as the user would type it again, for the records a command writes."""
    return "cutsearch " + shlex.join(sys.argv[1:])


def check_output_file(path, option: str = "--out") -> None:
    """Refuse an output path that is a directory before any long work, not after it."""
    if path is not None and path.is_dir():
        raise UserError(f"{option} {path} is a directory: name the file to write")


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


_terminated_by: list[int] = []  # the termination signal that stopped the command, if one did


def _terminate(signum: int, frame: object) -> None:
    signal.signal(signum, signal.SIG_DFL)  # a second one ends the process at once
    _terminated_by.append(signum)
    raise KeyboardInterrupt  # where the program stands, so that cleanup runs as for Ctrl-C


def _stop_cleanly_on_termination() -> None:
    # `timeout`, job schedulers and a closed terminal send these; their default leaves nvcc running.
    for signum in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(signum) is signal.SIG_DFL:  # nohup's SIG_IGN stays
            signal.signal(signum, _terminate)


def main() -> None:
    import cutsearch.cli  # noqa: F401 - registers the commands

    _stop_cleanly_on_termination()
    try:
        # Without standalone mode, typer returns the exit code of Ctrl-C (130) and of typer.Exit.
        code = app(standalone_mode=False)
    except UserError as exc:
        # One line, never wrapped: scripts grep it and people read it.
        print(f"error: {' '.join(str(exc).split())}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        code = 130
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        sys.exit(1)
    except Exception as exc:  # noqa: BLE001 - usage errors from click, or typer's vendored click
        if _during_interrupt(exc):
            # Ctrl-C inside a library's cleanup (Optuna's journal lock, say) raises from there.
            code = 130
        elif isinstance(exc, OSError):
            # A path the user named that cannot be read or written: a directory, a missing folder.
            where = f": {exc.filename}" if exc.filename else ""
            print(f"error: {exc.strerror or exc}{where}", file=sys.stderr)
            sys.exit(2)
        else:
            _click_error(exc)
            raise
    if code == 130:
        how = f"terminated by {signal.Signals(_terminated_by[0]).name}" if _terminated_by else "interrupted"
        err.print(f"{how}: {_SAVED.get(_command_name(), 'nothing was written')}")
        if _terminated_by:
            code = 128 + _terminated_by[0]  # the shell's code for a process the signal ended
    if isinstance(code, int) and code:
        sys.exit(code)


# What an interrupted command keeps, by command.
_SAVED = {name: "finished trials are saved; run the same command to resume" for name in ("search", "worker", "suite")}
_SAVED["build"] = "the kernels built so far are cached; run the same command to build the rest"


def _command_name() -> str:
    return next((arg for arg in sys.argv[1:] if not arg.startswith("-")), "")


def _during_interrupt(exc: BaseException) -> bool:
    seen = 0
    while exc is not None and seen < 16:
        if isinstance(exc, KeyboardInterrupt):
            return True
        exc, seen = exc.__context__ or exc.__cause__, seen + 1
    return False


def _click_error(exc: Exception) -> None:
    # Typer ships its own copy of click, so match the class by name along the MRO.
    if any(c.__name__ == "ClickException" for c in type(exc).__mro__):
        # One line, like a UserError, rather than click's usage block.
        message = " ".join(exc.format_message().split())
        if message:  # none where the help was printed instead (no arguments at all)
            print(f"error: {message} (see --help)", file=sys.stderr)
        sys.exit(getattr(exc, "exit_code", 2))
