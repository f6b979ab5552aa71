"""What a new user meets first: every subcommand takes a stdlib name, and documented outputs stay out of git."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import shapec
from shapec.cli import main

ROOT = Path(__file__).resolve().parents[2]
STDLIB = ROOT / "shapec" / "stdlib"
ENV = {**os.environ, "SHAPEC_BACKEND": "interpreter"}


def test_check_accepts_a_stdlib_name(capsys):
    assert main(["check", "nemo_rl"]) == 0
    assert capsys.readouterr().out == "1 file ok\n"


def test_check_mixes_stdlib_names_files_and_directories(capsys):
    assert main(["check", "short_rl", str(STDLIB / "miles.shape"), str(ROOT / "examples")]) == 0
    count = 2 + len(list((ROOT / "examples").rglob("*.shape")))
    assert capsys.readouterr().out == f"{count} files ok\n"


def test_check_of_a_misspelled_stdlib_name_names_the_closest(capsys):
    assert main(["check", "nemo_lr"]) == 2
    assert capsys.readouterr().err == (
        "shapec: error: nemo_lr: neither a .shape file nor a stdlib module; did you mean 'nemo_rl'?\n")


def test_check_of_a_missing_shape_file_is_still_a_missing_file(capsys):
    assert main(["check", "nope.shape"]) == 2
    assert capsys.readouterr().err == "shapec: error: nope.shape: no such file or directory\n"


def test_compile_accepts_a_stdlib_name(capsys):
    assert main(["compile", "nemo_rl", "--shaper", "length_penalty"]) == 0
    from shapec.compiler.lowering.module import emit_python

    expected = emit_python(shapec.load("nemo_rl", backend="interpreter").ir("length_penalty"))
    assert capsys.readouterr().out == expected


def test_compile_of_an_unknown_name_lists_the_stdlib(capsys):
    assert main(["compile", "zzz"]) == 2
    err = capsys.readouterr().err
    known = ", ".join(sorted(p.stem for p in STDLIB.glob("*.shape")))
    assert err == f"shapec: error: zzz: neither a .shape file nor a stdlib module; stdlib modules: {known}\n"


def test_compile_of_a_directory_says_it_takes_one_file(capsys):
    assert main(["compile", str(ROOT / "examples")]) == 2
    assert "examples: a directory; expected one .shape file or a stdlib module name" in capsys.readouterr().err


def test_check_and_compile_take_stdlib_names_from_the_shell():
    for args in (["check", "miles"], ["compile", "miles", "--shaper", "length_penalty"]):
        proc = subprocess.run([sys.executable, "-m", "shapec.cli", *args], capture_output=True, text=True,
                              env=ENV, timeout=120)
        assert proc.returncode == 0, proc.stderr


def _documented_outputs() -> list[tuple[str, str]]:
    """(page, path) of every `--out PATH` in a shell example of the README and docs."""
    found = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for block in re.findall(r"```(?:bash|console|sh)\n(.*?)```", page.read_text(), re.S):
            found += [(page.name, out) for out in re.findall(r"--out\s+(\S+)", block)]
    return found


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_readme_main_job_leaves_git_status_clean(tmp_path):
    """Run the README's main job in a fresh clone: git sees no new file."""
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(clone)], check=True, timeout=120)
    for name in (".gitignore", "README.md", "out/.gitignore"):  # the working tree's: uncommitted edits count
        shutil.copy(ROOT / name, clone / name)
    readme = (clone / "README.md").read_text()
    command = re.findall(r"^\$ (shapec run .*?[^\\])$", readme.replace("\\\n", ""), re.M)[0]  # the first: the main job
    before = subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True).stdout
    proc = subprocess.run(command, shell=True, cwd=clone, capture_output=True, text=True, env=ENV, timeout=300)
    assert proc.returncode == 0, proc.stderr
    out = re.search(r"--out\s+(\S+)", command).group(1)
    assert (clone / out).is_file()
    after = subprocess.run(["git", "status", "--porcelain"], cwd=clone, capture_output=True, text=True).stdout
    assert after == before


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
@pytest.mark.parametrize(("page", "out"), _documented_outputs())
def test_every_documented_output_is_git_ignored(page, out):
    proc = subprocess.run(["git", "check-ignore", "-q", "--no-index", out], cwd=ROOT)
    assert proc.returncode == 0, f"{page}: `--out {out}` would show in git status; write it under out/"


MY_FIRST = ('shaper brevity(coeff: float in [0, 1] = 0.1) requires binary produces real {\n'
            '  input correct: bool\n  input length: tokens\n'
            '  term pen = -coeff * length / max(length) on correct\n}\n')


@pytest.mark.parametrize("command", ["run", "explain"])
@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_an_input_no_row_has_is_one_error_naming_the_fields_the_rows_have(tmp_path, capsys, command, suffix):
    """A first spec reads `correct` from rollouts that call it `reward`: one line saying so, not a bad
    row in every group."""
    spec = tmp_path / "mine.shape"
    spec.write_text(MY_FIRST)
    data = ROOT / "examples" / "data" / "rollouts.jsonl"
    if suffix == ".parquet":
        import pyarrow.json as pj
        import pyarrow.parquet as pq

        pq.write_table(pj.read_json(data).select(["prompt_id", "reward", "length"]), tmp_path / "r.parquet")
        data = tmp_path / "r.parquet"
    out = ["--out", str(tmp_path / "o.jsonl")] if command == "run" else []
    assert main([command, str(spec), "--backend", "interpreter", "--data", str(data), *out]) == 1
    err = capsys.readouterr().err
    fields = ("prompt_id, sample, reward, reasoning, answer, low_effort, profile_band, profile_band.total, "
              "... and 13 more" if suffix == ".jsonl" else "prompt_id, reward, length")
    assert err.endswith("error: input 'correct' (`input correct: bool`): no row of the first 48 has this field; "
                        f"the rows have {fields}\nto read an input from a field of another name: --map "
                        "correct=FIELD, or derive a bool: --map correct='reward > 0'\n"), err
    assert not (tmp_path / "o.jsonl").exists()
