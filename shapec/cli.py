"""Command line: shapec check | compile | run | explain | plot | fmt.

`check` and `fmt` never import numba, so they stay fast enough for pre-commit hooks.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import warnings
from pathlib import Path

from . import __version__
from .paths import printable
from .tools.commands import UsageError, add_commands, number, shape_files


def _spec_files(specs: list[str]) -> list[Path]:
    """Files and directories as given; any other word is a stdlib module name (a typo is a usage error)."""
    from .run.spec import ToolError, is_path, stdlib_path

    files: list[Path] = []
    for spec in specs:
        try:
            files += shape_files([spec]) if is_path(spec) else [stdlib_path(spec)]
        except ToolError as err:
            raise UsageError(str(err)) from None
    return files


def cmd_check(args) -> int:
    from .tools.checking import check_files, cmd_prove

    files = _spec_files(args.paths)
    if args.prove:
        return cmd_prove(files, args)
    diags = check_files(files)
    if args.format == "json":
        print(json.dumps([d.to_json() for d in diags], indent=2))
    else:
        for d in diags:
            print(d.render(), file=sys.stderr)
        if not diags and not args.quiet:
            print(f"{len(files)} file{'s' if len(files) != 1 else ''} ok")
    return 1 if diags else 0


def cmd_compile(args) -> int:
    """Print the generated kernel module of one shaper or pipeline (or of each, without --shaper)."""
    from .api import compile_file
    from .run.spec import ToolError, spec_path

    try:
        path = spec_path(args.file)
    except ToolError as err:
        raise UsageError(str(err)) from None
    module = compile_file(path, backend="interpreter")  # checked IR only; lowering imports numba lazily
    names = module.names()
    if args.shaper is not None and args.shaper not in names:
        import difflib

        close = difflib.get_close_matches(args.shaper, names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UsageError(f"{printable(path)} has no shaper or pipeline {args.shaper!r}{hint}")
    from .compiler.lowering.module import emit_python

    for name in [args.shaper] if args.shaper else names:
        sys.stdout.write(emit_python(module.ir(name)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="shapec", description="Reward-shaping specs: check, compile, run.")
    parser.add_argument("--version", action="version", version=f"shapec {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("check", help="check .shape files and report every error")
    p.add_argument("paths", nargs="+", help="files, directories or stdlib module names")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--quiet", "-q", action="store_true", help="print nothing when every file is valid")
    p.add_argument("--prove", action="store_true", help="decide every property of every shaper (needs the prove extra)")
    p.add_argument("--counterexamples", metavar="DIR", default="shapec-counterexamples",
                   help="--prove: where counterexample groups are written (default shapec-counterexamples)")
    p.add_argument("--trials", type=number("--trials"), default=400, metavar="N",
                   help="--prove: random groups per property")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("compile", help="print the generated numba kernel module of a shaper or pipeline")
    p.add_argument("file", help="a .shape file, or a stdlib module name such as nemo_rl")
    p.add_argument("--shaper", metavar="NAME", help="one shaper or pipeline (default: every one in the file)")
    p.add_argument("--emit", choices=("python",), default="python", help="what to print (default: python)")
    p.set_defaults(func=cmd_compile)

    add_commands(sub)
    return parser


def main(argv: list[str] | None = None, keep_signal_handlers: bool = False) -> int:
    """Exit status 130 or 143 means an interrupted command left every file as it was; a signal that
    arrives once its files are being renamed into place no longer stops it (run/atomic.Signals)."""
    from .syntax.source import ShapeError
    from .run.spec import ToolError

    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help/--version
        return int(exc.code or 0)
    except (UsageError, ToolError) as err:  # a numeric option out of range (commands.number)
        print(f"shapec: error: {err}", file=sys.stderr)
        return 2 if isinstance(err, UsageError) else 1
    from .run.atomic import Interrupted, Signals

    signals = Signals()
    try:
        with signals.installed(restore=not keep_signal_handlers), warnings.catch_warnings():
            warnings.showwarning = _show_warning
            code = args.func(args)
    except (KeyboardInterrupt, Interrupted) as err:  # run says more itself; fmt's files are whole either way
        terminated = isinstance(err, Interrupted)
        print(f"shapec {args.command}: {'terminated' if terminated else 'interrupted'}", file=sys.stderr)
        return 143 if terminated else 130
    except UsageError as err:
        print(f"shapec: error: {err}", file=sys.stderr)
        return 2
    except ToolError as err:
        print(f"shapec: error: {err}", file=sys.stderr)
        return 1
    except ShapeError as err:
        for d in err.diagnostics:
            print(d.render(), file=sys.stderr)
        return 1
    except OSError as err:  # a path the file system refuses past the commands' own checks: an error, not a traceback
        where = f"{printable(err.filename)}: " if err.filename is not None else ""
        print(f"shapec: error: {where}{err.strerror or err}", file=sys.stderr)
        return 1
    if signals.late:
        print(f"shapec {args.command}: {signals.late} after its files were written; it completed", file=sys.stderr)
    return code


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A warning as the CLI's other lines are written, without the Python file and line it came from."""
    print(f"shapec: warning: {message}", file=sys.stderr)


def entry() -> None:
    """The `shapec` command: main(), then exit without the interpreter's last garbage collection.

    A run that loaded numba kernels leaves a large graph of compiler objects; the collection at
    exit walks all of it (70 ms, a sixth of a warm `shapec run`) only to free memory the process
    is about to give back. Every output is written and closed by now, so the objects are frozen
    (gc.freeze) and exit frees them without the walk. Tests call main(), which leaves gc alone.
    The signal handlers stay to the exit, so a Ctrl-C after the command finished changes nothing."""
    code = main(keep_signal_handlers=True)
    sys.stdout.flush()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    entry()
