"""The run / explain / plot / fmt subcommands: argument wiring only; the work is in sibling modules."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from ..paths import not_a_file, path_kind, printable
from ..run.spec import ToolError


class UsageError(Exception):
    """Bad arguments or unreadable files: exit status 2."""


def number(option: str, kind: type = int, lo: float = 1, hi: float | None = None, expected: str | None = None,
           error: type[Exception] = UsageError):
    """An argparse type for a numeric option: an int >= lo, or a finite float > lo, and <= hi, checked
    at parse time so that inf, nan, -1 or 0 is one error line before any work, never a traceback or
    a silent no-op. A word that is no number stays argparse's own error; a value out of range
    raises `error` (argparse lets it through to `cli.main`), naming the option and what it takes."""
    if expected is None:
        expected = f"a finite number > {lo:g}" if kind is float else \
            "a positive integer" if lo == 1 else f"an integer >= {lo}"

    def parse(text: str):
        value = kind(text)  # ValueError: argparse's "invalid int value: 'x'"
        ok = value >= lo if kind is int else math.isfinite(value) and value > lo
        if not ok or (hi is not None and value > hi):
            raise error(f"{option}: expected {expected}, got {text}")
        return value

    parse.__name__ = kind.__name__  # argparse names the type in its own message
    return parse


def field_path(option: str):
    """An argparse type for a field option (--group-by, --agent-by): an empty name would quietly
    fall back to the default field, so it is a usage error instead."""

    def parse(text: str) -> str:
        if not text.strip():
            raise UsageError(f"{option}: expected a field name or a dotted path such as agent_ref.name, got "
                             f"{text!r}")
        return text

    parse.__name__ = "field"
    return parse


def map_entry(text: str) -> tuple[str, str]:
    """An argparse type for --map NAME=FIELD."""
    from ..run.fieldmap import MapError, map_entry as parse

    try:
        return parse(text)
    except MapError as err:
        raise UsageError(str(err)) from None


map_entry.__name__ = "NAME=FIELD"


def _spec_args(p: argparse.ArgumentParser, default_backend: str = "$SHAPEC_BACKEND or numba") -> None:
    p.add_argument("spec", help="a .shape file, or a stdlib module name such as nemo_rl")
    p.add_argument("--shaper", help="shaper or pipeline to use (default: the only one, or the only pipeline)")
    p.add_argument("--config", help="YAML params: shaper/stage names -> params, or a NeMo-RL config with grpo:")
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                   help="override one param (a YAML 1.2 value; STAGE.KEY for a pipeline stage); repeatable")
    p.add_argument("--backend", choices=("numba", "interpreter"),
                   help=f"execution backend (default: {default_backend})")
    p.add_argument("--parallel", action=argparse.BooleanOptionalAction, default=None,
                   help="numba kernels on all cores for large chunks (default: $SHAPEC_PARALLEL or off)")


def _data_args(p: argparse.ArgumentParser, required: bool) -> None:
    p.add_argument("--data", required=required, help="rollouts: .jsonl or .parquet")
    p.add_argument("--layout", choices=("flat", "nemo-gym"), default="flat", help="row layout (default: flat)")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--group-by", metavar="COLUMN", type=field_path("--group-by"),
                       help="group key column; a group is a contiguous run of one key (default: prompt_id)")
    group.add_argument("--group-size", type=number("--group-size"), metavar="N", help="groups are N contiguous rows")
    p.add_argument("--length-type", choices=("chars", "tokens"),
                   help="nemo-gym: count lengths in characters or tokenizer tokens (default: the config's "
                        "length_type, else tokens with --tokenizer; characters reaching a tokens input need chars)")
    p.add_argument("--tokenizer", help="nemo-gym: Hugging Face tokenizer name or path, to count tokens")
    p.add_argument("--map", dest="maps", action="append", default=[], metavar="NAME=FIELD", type=map_entry,
                   help="read input or metadata NAME from FIELD (a dotted path allowed), or derive a bool input: "
                        "--map correct='reward > 0'; repeatable, over the config's map: block")
    p.add_argument("--agent-by", metavar="PATH", type=field_path("--agent-by"),
                   help="where a row names its agent, for agent_overrides (default: agent_ref.name for "
                        "nemo-gym, agent for flat)")


# explain and plot shape a few groups: the interpreter answers at once, where a first numba compile takes seconds
SMALL_INPUTS_BACKEND = "interpreter"
MIN_WIDTH = 40  # a narrower table is nothing but borders and ellipses


def add_commands(sub) -> None:
    p = sub.add_parser("run", help="shape a rollout file and write the shaped rollouts")
    _spec_args(p)
    _data_args(p, required=True)
    p.add_argument("--out", required=True, help="shaped rollouts: .jsonl or .parquet")
    p.add_argument("--chunk-rows", type=number("--chunk-rows"), default=65536, metavar="N",
                   help="rows per chunk (whole groups only; default 65536)")
    p.add_argument("--on-bad-row", choices=("stop", "skip"), default="stop",
                   help="stop at a bad row, or skip its group into <out>.rejects.jsonl (default: stop)")
    p.add_argument("--allow-short-last-group", action="store_true",
                   help="with a group size: shape a last group with fewer rows (default: an error when the "
                        "group size does not divide the rows)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar even on a terminal")
    p.add_argument("--breakdown", action="store_true",
                   help="also write each rollout's term.NAME and factor.NAME columns (off: the kernel skips them)")
    p.add_argument("--engine", choices=("local", "ray"), default="local",
                   help="shape chunks in this process, or on Ray workers ($RAY_ADDRESS names a cluster; "
                        "default: local)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("explain", help="show, group by group, what a shaper does to each rollout")
    _spec_args(p, SMALL_INPUTS_BACKEND)
    _data_args(p, required=True)
    p.add_argument("--group", action="append", default=[], metavar="ID",
                   help="only this group (its key, or its 0-based index with --group-size); repeatable")
    p.add_argument("--limit", type=number("--limit"), default=20, metavar="N",
                   help="show at most this many groups (default 20)")
    p.add_argument("--width", type=number("--width", lo=MIN_WIDTH), metavar="N",
                   help=f"table width, at least {MIN_WIDTH} (default: the terminal's)")
    # out of range: exit status 1, as the check inside explain gave before options were typed
    p.add_argument("--digits", type=number("--digits", hi=17, expected="1 to 17 significant digits", error=ToolError),
                   metavar="N", help="significant digits of every number, 1 to 17 (default 4)")
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("plot", help="plot shaped reward against length (and length distributions with --data)")
    _spec_args(p, SMALL_INPUTS_BACKEND)
    _data_args(p, required=False)
    p.add_argument("--out", required=True, help="image file (.png, .svg or .pdf)")
    p.add_argument("--channel", help="the input swept on the x axis (default: the first length input)")
    p.add_argument("--max-length", type=number("--max-length", float, lo=0), default=None, metavar="X",
                   help="x-axis end, a finite number > 0 (default: from params or data)")
    p.add_argument("--meta", dest="metas", action="append", default=[], metavar="NAME=VALUE",
                   help="metadata of the plotted group (YAML value, as in a data row); repeatable")
    p.set_defaults(func=cmd_plot)

    p = sub.add_parser("fmt", help="rewrite .shape files in canonical layout (comments kept)")
    p.add_argument("paths", nargs="+", help="files or directories")
    p.add_argument("--check", action="store_true", help="change nothing; print a diff and exit 1 if a file would change")
    p.set_defaults(func=cmd_fmt)


def shape_files(paths: list[str]) -> list[Path]:
    """The .shape files named or found under directories; a missing or unreadable one is a usage error."""
    files: list[Path] = []
    for p in paths:
        path = Path(p)
        kind = path_kind(path)
        if kind == "dir":
            try:  # regular files only: reading a FIFO named x.shape would wait forever, /dev/zero never end
                files.extend(f for f in sorted(path.rglob("*.shape")) if path_kind(f) == "file")
            except OSError as err:
                raise UsageError(f"{printable(p)}: cannot list ({err.strerror or err})") from None
        elif kind == "file":
            files.append(path)
        else:
            why = "no such file or directory" if kind == "missing" else not_a_file(kind)
            raise UsageError(f"{printable(p)}: {why}")
    for f in files:  # bytes only: text that is not UTF-8 is the spec's E102, at the byte, as compile says
        try:
            f.read_bytes()
        except OSError as err:
            raise UsageError(f"{printable(f)}: cannot read ({err.strerror or err})") from None
    return files


def cmd_fmt(args) -> int:
    from .fmt import format_files

    return format_files(shape_files(args.paths), args.check, sys.stdout, sys.stderr)


def _need_file(path: str | None, what: str) -> Path | None:
    if path is None:
        return None
    p = Path(path)
    kind = path_kind(p)
    if kind != "file":
        raise UsageError(f"{what} {printable(path)}: {not_a_file(kind)}")
    return p


def _spec_path(args) -> Path:
    """The spec's file; one that is not there is a usage error (exit 2), as in check and compile."""
    from ..run.spec import spec_path

    try:
        return spec_path(args.spec)
    except ToolError as err:
        raise UsageError(str(err)) from None


def _reads(args, data: Path | None, module=None) -> list[tuple[Path, str]]:
    """The files a command reads, which no output of it may be under any name: the spec, the specs
    it imports (once the module is loaded), the config and the data."""
    files = [(_spec_path(args), "the spec file")]
    files += [(path, "a spec the spec imports") for path in (module.imported_files() if module else ())]
    files += [(Path(args.config), "the config file")] if args.config else []
    return files + ([(data, "the input file")] if data else [])


def _setup(args):
    """Module, shaper and param plan from the common arguments."""
    from .config import build_plan, module_keys
    from ..api import compile_file
    from ..run.spec import pick_shaper

    _need_file(args.config, "--config")
    module = compile_file(_spec_path(args), args.backend, args.parallel)
    shaper = pick_shaper(module, args.shaper)
    plan = build_plan(shaper, module_keys(module), args.config, args.sets)
    return module, shaper, plan


def _layout_and_grouping(args, plan, allow_short_last: bool = True):
    """The row layout and the grouping; `allow_short_last` is off for `run`, where a group size
    that does not divide the rows is an error unless --allow-short-last-group says otherwise."""
    from ..run.rundata import FlatLayout, Grouping

    agent_key = (args.agent_by or ("agent_ref.name" if args.layout == "nemo-gym" else "agent")) \
        if plan.uses_agents else None
    fields = _field_map(args, plan)
    if args.layout == "nemo-gym":
        if fields:
            raise UsageError("--map reads flat rows; --layout nemo-gym reads each field where NeMo-Gym writes it")
        layout = _nemo_gym_layout(args, plan, agent_key)
    else:
        layout = FlatLayout(agent_key, fields)
    if args.group_size is not None:
        grouping = Grouping(key=None, size=args.group_size, allow_short_last=allow_short_last,
                            source="--group-size")
    elif args.group_by is None and args.layout == "nemo-gym" and plan.group_size is not None:
        grouping = Grouping(key=None, size=plan.group_size, allow_short_last=allow_short_last,
                            source="the config's grpo.num_generations_per_prompt")
    else:
        grouping = Grouping(key=args.group_by or "prompt_id",
                            source="--group-by" if args.group_by else "the default --group-by")
    return layout, grouping


def _field_map(args, plan) -> dict:
    """The config's map: block, then each --map over it (run/fieldmap.py)."""
    from ..run.fieldmap import MapError, read_map

    try:
        fields = read_map(plan.shaper, plan.field_map)
    except MapError as err:
        raise ToolError(str(err)) from None
    try:
        return {**fields, **read_map(plan.shaper, [(f"--map {name}={text}", name, text) for name, text in args.maps])}
    except MapError as err:
        raise UsageError(str(err)) from None


def _nemo_gym_layout(args, plan, agent_key):
    """NeMo-Gym rows, their texts counted in --length-type, else the config's length_type, else tokens
    when a tokenizer is given. Without a tokenizer the counts are characters: where they would reach
    a `tokens` input, shaping as if they were tokens, they are refused unless the user said the
    lengths are characters."""
    from ..run.rundata import NemoGymLayout
    from ..run.spec import stage_irs

    length_type = args.length_type or plan.length_type or ("tokens" if args.tokenizer else None)
    if args.tokenizer and length_type == "chars":  # one of the two would be ignored, silently
        said = "--length-type chars" if args.length_type else "the config's length_type is chars"
        raise UsageError(f"--tokenizer {printable(args.tokenizer)} counts tokens, but {said}; give one of the two")
    tokenizer = _load_tokenizer(args.tokenizer) if length_type == "tokens" and args.tokenizer else None
    layout = NemoGymLayout(length_type or "chars", tokenizer, agent_key)
    inputs = {name: typ for ir in stage_irs(plan.shaper) for name, typ in ir.inputs}
    wrong = [name for name in layout.text_lengths if inputs.get(name) == "tokens"]
    if layout.unit == "chars" and length_type != "chars" and wrong:
        source = "" if length_type is None else \
            " (--length-type tokens)" if args.length_type else " (the config's length_type is tokens)"
        names = " and ".join(f"input {name!r} (`input {name}: tokens`)" for name in wrong)
        raise UsageError(f"--layout nemo-gym: {names} {'reads' if len(wrong) == 1 else 'read'} tokens, but without "
                         f"--tokenizer{source} the lengths are characters; give --tokenizer NAME (a Hugging Face "
                         f"tokenizer) to count tokens, or --length-type chars to shape with character counts")
    return layout


def _load_tokenizer(name: str):
    try:
        from transformers import AutoTokenizer
    except ImportError:
        raise UsageError("--tokenizer needs the transformers package (pip install transformers)") from None
    return AutoTokenizer.from_pretrained(name)


def cmd_run(args) -> int:
    """Exit status 2 with one `cannot write` line when an output cannot be written, 130 on Ctrl-C
    and 143 on SIGTERM (cli.main handles both); in every failure the previous output and rejects files
    stay as they were. A signal once the renames have begun no longer stops the run (exit status 0)."""
    from ..run.atomic import Interrupted, OutputError
    from ..run.rundata import format_report, run_file

    from ..run.readers import input_format

    data = _need_file(args.data, "--data")
    for path in (data, Path(args.out)):
        try:
            input_format(path)
        except ToolError as err:  # a file type run cannot read or write: a usage error
            raise UsageError(str(err)) from None
    try:
        module, shaper, plan = _setup(args)
        layout, grouping = _layout_and_grouping(args, plan, allow_short_last=args.allow_short_last_group)
        engine = None
        if args.engine == "ray":
            from ..run.ray_engine import shape_chunks as engine
        report = run_file(shaper, plan, layout, data, Path(args.out), grouping, args.chunk_rows,
                          args.on_bad_row, progress=not args.no_progress, engine=engine,
                          breakdown=args.breakdown, reads=tuple(_reads(args, None, module)))
    except OutputError as err:
        print(f"shapec run: {err}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, Interrupted) as err:
        what = "terminated" if isinstance(err, Interrupted) else "interrupted"
        print(f"shapec run: {what}; {printable(args.out)} was left as it was", file=sys.stderr)
        return 143 if isinstance(err, Interrupted) else 130
    print(format_report(report, args.spec, shaper.name, data))
    return 0


def cmd_explain(args) -> int:
    from .explain import explain

    data = _need_file(args.data, "--data")
    args.backend = args.backend or SMALL_INPUTS_BACKEND
    _, shaper, plan = _setup(args)
    layout, grouping = _layout_and_grouping(args, plan)
    return explain(shaper, plan, layout, data, grouping, args.group, args.limit, args.width, digits=args.digits)


def cmd_plot(args) -> int:
    """An image that cannot be written is `shapec plot: cannot write OUT: REASON`, exit status 2, as in run."""
    from ..run.atomic import OutputError, refuse_overwriting
    from .plot import plot

    data = _need_file(args.data, "--data")
    args.backend = args.backend or SMALL_INPUTS_BACKEND
    try:
        refuse_overwriting([(Path(args.out), "--out")], _reads(args, data))
        module, shaper, plan = _setup(args)
        refuse_overwriting([(Path(args.out), "--out")], _reads(args, data, module))
        if args.maps and not data:
            raise UsageError("--map names the fields of --data; give --data too")
        layout, grouping = _layout_and_grouping(args, plan) if data else (None, None)
        plot(shaper, plan, Path(args.out), channel=args.channel, max_length=args.max_length,
             data=data, layout=layout, grouping=grouping, metas=args.metas)
    except OutputError as err:
        print(f"shapec plot: {err}", file=sys.stderr)
        return 2
    print(f"wrote {printable(args.out)}")
    return 0
