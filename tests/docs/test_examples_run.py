"""Every shell and Python example of the README and docs runs, and prints what the page says.

The convention, for page authors:

- ```console blocks: `$ ` lines are commands (a line ending in `\\` continues on the next); the lines
  up to the next `$ ` are the expected output (stdout and stderr together). A line `...` in the
  expected output stands for any number of lines.
- ```bash / ```sh blocks: every command runs and must exit 0 (their output is not shown, so not compared).
- ```python blocks with `>>>` prompts are doctests (whitespace-normalised, `...` as ellipsis);
  without prompts they run and must not raise. A page's Python blocks share one namespace, which
  starts with `load` bound to `shapec.load`, as in the stdlib's docstring examples.
- `<!-- file: NAME -->` right before a block writes the block's text to NAME first (a spec the
  page shows, then checks or runs).
- `<!-- no-run: REASON -->` right before a block skips it; the reason is required.

Each page runs in its own temporary folder laid out like the checkout (a copy of `examples/` and of
the git-ignored `out/` folder that documented commands write to), blocks in page order,
with the interpreter backend (the examples are about results, not kernels). Output is compared
after exactly these normalisations: the folder's absolute path is removed, trailing spaces of each
line are dropped, and so are trailing blank lines.
"""

from __future__ import annotations

import doctest
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = ("console", "bash", "sh")
PYTHON = ("python", "pycon")
BLOCK = re.compile(r"((?:^<!-- [^\n]*-->\n)*)^```(\w*)[^\n]*\n(.*?)^```", re.M | re.S)
MARK = re.compile(r"<!-- (no-run|file):\s*(.*?)\s*-->")


@dataclass
class Block:
    line: int
    lang: str
    text: str
    marks: dict[str, str]


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    out = []
    for m in BLOCK.finditer(text):
        marks = dict(MARK.findall(m.group(1)))
        out.append(Block(text.count("\n", 0, m.start(2)) + 1, m.group(2), m.group(3), marks))
    return out


def commands(text: str, prompted: bool) -> list[tuple[str, list[str]]]:
    """(command, expected output lines): `$ ` commands with their output, or every line of a script."""
    out: list[tuple[str, list[str]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if prompted and not line.startswith("$ "):
            if not out:
                raise ValueError(f"output before the first `$ ` prompt: {line!r}")
            out[-1][1].append(line)
            continue
        cmd = line[2:] if prompted else line.split(" #")[0].strip()
        if not cmd or cmd.startswith("#"):
            continue
        while cmd.endswith("\\") and i < len(lines):
            cmd = cmd[:-1] + " " + lines[i].strip()
            i += 1
        out.append((cmd, []))
    return out


def normalise(text: str, work: Path) -> list[str]:
    lines = [line.rstrip() for line in text.replace(f"{work}/", "").replace(str(work), ".").splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines


def matches(expected: list[str], got: list[str]) -> bool:
    """`...` lines match any run of lines (possibly empty)."""
    if not expected:
        return not got
    if expected[0].strip() == "...":
        return any(matches(expected[1:], got[k:]) for k in range(len(got) + 1))
    return bool(got) and expected[0].rstrip() == got[0] and matches(expected[1:], got[1:])


def run_page(page: Path, work: Path) -> list[str]:
    """Every failure of the page's blocks, each naming its line."""
    env = {**os.environ, "SHAPEC_BACKEND": "interpreter", "PYTHONPATH": os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]), "COLUMNS": "160"}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    import shapec

    failures = []
    globs: dict = {"load": shapec.load}
    for b in blocks(page):
        where = f"{page.name}:{b.line}"
        if "file" in b.marks:
            (work / b.marks["file"]).write_text(b.text)
        if b.lang not in SHELL + PYTHON:
            continue
        if "no-run" in b.marks:
            if not b.marks["no-run"]:
                failures.append(f"{where}: `no-run` needs a reason")
            continue
        if b.lang in SHELL:
            failures += _shell(b, where, work, env)
        else:
            failures += _python(b, where, work, globs)
    return failures


def _shell(b: Block, where: str, work: Path, env: dict) -> list[str]:
    failures = []
    prompted = b.lang == "console"
    try:
        cmds = commands(b.text, prompted)
    except ValueError as err:
        return [f"{where}: {err}"]
    for cmd, expected in cmds:
        proc = subprocess.run(["bash", "-c", cmd], cwd=work, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=300)
        got = normalise(proc.stdout, work)
        if prompted and not matches(normalise("\n".join(expected), work), got):
            failures.append(f"{where}: `{cmd}` printed\n" + "\n".join(got) + "\nbut the page shows\n"
                            + "\n".join(expected))
        elif not prompted and proc.returncode != 0:
            failures.append(f"{where}: `{cmd}` exited {proc.returncode}:\n" + "\n".join(got[-10:]))
    return failures


def _python(b: Block, where: str, work: Path, globs: dict) -> list[str]:
    cwd = Path.cwd()
    os.chdir(work)
    try:
        if ">>>" not in b.text:
            try:
                exec(compile(b.text, where, "exec"), globs)
            except Exception as err:  # noqa: BLE001 - any exception is the example failing
                return [f"{where}: raised {type(err).__name__}: {err}"]
            return []
        test = doctest.DocTestParser().get_doctest(b.text, globs, where, where, b.line)
        report: list[str] = []
        runner = doctest.DocTestRunner(optionflags=doctest.NORMALIZE_WHITESPACE | doctest.ELLIPSIS)
        runner.run(test, out=report.append, clear_globs=False)
        return [f"{where}: doctest failed\n{''.join(report)}"] if runner.failures else []
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_page_examples_run_and_print_what_the_page_says(page, tmp_path, monkeypatch):
    monkeypatch.setenv("SHAPEC_BACKEND", "interpreter")
    for folder in ("examples", "out"):
        shutil.copytree(ROOT / folder, tmp_path / folder)
    failures = run_page(page, tmp_path)
    assert not failures, "\n\n".join(failures)


def test_the_convention_catches_drift(tmp_path):
    """A wrong output, a failing command, a failing doctest and a reasonless skip each fail."""
    page = tmp_path / "page.md"
    page.write_text("<!-- file: s.shape -->\n```shape\nshaper s() { term t = 1 }\n```\n\n"
                    "```console\n$ echo hello\nhullo\n```\n\n```bash\nfalse\n```\n\n"
                    "```python\n>>> 1 + 1\n3\n```\n\n<!-- no-run: -->\n```bash\nfalse\n```\n\n"
                    "```console\n$ cat s.shape\n...\n```\n\n<!-- no-run: needs a GPU -->\n```bash\nfalse\n```\n")
    work = tmp_path / "work"
    work.mkdir()
    failures = run_page(page, work)
    assert [f.split("\n")[0] for f in failures] == [
        "page.md:6: `echo hello` printed", "page.md:11: `false` exited 1:", "page.md:15: doctest failed",
        "page.md:21: `no-run` needs a reason"]
    assert (work / "s.shape").read_text() == "shaper s() { term t = 1 }\n"


def test_matches_treats_dots_as_any_lines():
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"]) and matches(["a", "..."], ["a"])
    assert not matches(["a", "...", "d"], ["a", "b"]) and not matches(["a"], ["a", "b"])
