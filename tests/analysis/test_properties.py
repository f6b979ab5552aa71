"""`ensure` clauses and `shapec check --prove`: every E7xx/W7xx code at its place, and the corrected form."""

import json

import pytest

from shapec import cli
from shapec.checker.codes import PROPERTY_CODES

from ..helpers import assert_error, assert_ok, position

HEAD = "shaper s(w: float = 1) requires binary produces real {\n  input t: tokens\n"


def spec(*lines: str, head: str = HEAD) -> str:
    return head + "".join(f"  {line}\n" for line in lines) + "}\n"


def prove(tmp_path, source: str, trials: int = 200) -> tuple[int, list[dict], list[dict]]:
    path = tmp_path / "s.shape"
    path.write_text(source)
    out = tmp_path / "out.json"
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = cli.main(["check", "--prove", "--format", "json", "--trials", str(trials),
                       "--counterexamples", str(tmp_path / "cx"), str(path)])
    out.write_text(buf.getvalue())
    got = json.loads(buf.getvalue())
    return rc, got["diagnostics"], got["properties"]


# (code, bad source, snippet under the caret, corrected source)
CLAUSE_CASES = [
    ("E701", spec("ensure ordr_kept"), "ensure ordr_kept", spec("ensure order_kept")),
    ("E702", spec("ensure within"), "ensure within", spec("ensure within [0, 1]")),
]


@pytest.mark.parametrize("code, bad, snippet, good", CLAUSE_CASES, ids=[c[0] for c in CLAUSE_CASES])
def test_clause_errors(code, bad, snippet, good):
    assert_error(bad, code, snippet)
    assert_ok(good)


def test_clause_error_messages():
    assert_error(spec("ensure ordr_kept"), "E701", "ensure", message="did you mean 'order_kept'?")
    assert_error(spec("ensure order_kept over binry"), "E702", "ensure", message="unknown reward domain 'binry'")
    assert_error(spec("ensure order_kept when t > 0"), "E702", "t > 0", message="only params and constants")
    assert_error(spec("ensure shorter_not_worse(w) on reward > 0"), "E702", "ensure", message="numeric input")
    assert_error(spec("ensure order_kept over real"), "E702", "ensure", message="wider than")


PENALTY = "term cost = -w * float(t) / 100 on reward > 0"
CONT = "shaper cont() requires binary produces real {\n  input t: tokens\n  term c = -float(t) / 100 on reward > 0\n"
ADV = ("shaper adv() produces advantage {\n"
       "  result = (reward - mean(reward)) / (std(reward) + 1e-6)\n}\npipeline p = cont >> adv\n")
# (code, bad, snippet of the main diagnostic, snippet of its note or None, corrected)
PROVE_CASES = [
    ("E703", spec("ensure order_kept", PENALTY), "ensure order_kept", "-w * float(t) / 100",
     spec("ensure order_kept", PENALTY, "clamp >= 0")),
    ("E704", spec("ensure all_wrong_unchanged", "term bonus = 0.5"), "ensure all_wrong_unchanged", "0.5",
     spec("ensure all_wrong_unchanged", "term bonus = 0.5 on reward > 0")),
    ("E705", spec("ensure within [0, 1]", "term bonus = 0.5 on reward > 0"), "ensure within", "0.5 on",
     spec("ensure within [0, 1.5]", "term bonus = 0.5 on reward > 0")),
    ("E706", spec("ensure shorter_not_worse(t) on reward > 0", "term b = float(t) / 1000 on reward > 0", "clamp >= 0"),
     "ensure shorter_not_worse", "float(t) / 1000",
     spec("ensure shorter_not_worse(t) on reward > 0", "term b = -float(t) / 1000 on reward > 0", "clamp >= 0")),
    ("W701", spec(PENALTY), "-w * float(t) / 100", None, spec(PENALTY, "clamp >= 0")),
    ("W702", spec("term bonus = 0.5"), "0.5", None, spec("term bonus = 0.5 on reward > 0")),
    ("W703", CONT + "  clamp >= 0\n}\n" + ADV, "adv\n", None,
     "shaper cont() requires binary produces real {\n  input t: tokens\n"
     "  result = clip(reward - float(t) / 100, 0, 1)\n}\n" + ADV),
    ("W704", spec("ensure shorter_not_worse(t) on reward > 0", "factor p = max(1, float(t) / 100) ** -w on reward > 0",
                  head="shaper s(w: float >= 0 = 1) requires binary produces real {\n  input t: tokens\n"),
     "ensure shorter_not_worse", None,
     spec("ensure shorter_not_worse(t) on reward > 0", "factor p = 100 / max(100, float(t)) on reward > 0")),
    ("W705", spec("ensure order_kept when w == 0", PENALTY, head=HEAD.replace("float = 1", "float >= 0 = 1")),
     "ensure order_kept", None,
     spec("ensure order_kept when w == 0", PENALTY, head=HEAD.replace("float = 1", "float >= 0 = 0"))),
]


@pytest.mark.parametrize("code, bad, snippet, note, good", PROVE_CASES, ids=[c[0] for c in PROVE_CASES])
def test_prove_codes_position_note_and_fix(tmp_path, code, bad, snippet, note, good):
    rc, diags, _ = prove(tmp_path, bad)
    main = [d for d in diags if d["severity"] != "note"]
    assert [d["code"] for d in main] == [code], main
    assert (main[0]["line"], main[0]["column"]) == position(bad, snippet)
    assert main[0]["severity"] == ("error" if code.startswith("E") else "warning")
    assert rc == (1 if code.startswith("E") else 0)
    notes = [d for d in diags if d["severity"] == "note"]
    if note is not None:
        assert [(n["code"], n["line"], n["column"]) for n in notes] == [(code, *position(bad, note))]
    rc, diags, _ = prove(tmp_path, good)
    assert (rc, diags) == (0, []), diags


def test_every_property_code_is_tested_and_documented():
    from pathlib import Path

    tested = {c[0] for c in CLAUSE_CASES} | {c[0] for c in PROVE_CASES}
    assert tested == set(PROPERTY_CODES)
    text = (Path(__file__).resolve().parents[2] / "docs" / "errors.md").read_text()
    for code, meaning in PROPERTY_CODES.items():
        assert f"| `{code}` | {meaning} |" in text


def test_warning_renders_in_text(tmp_path, capsys):
    path = tmp_path / "s.shape"
    path.write_text(spec("term bonus = 0.5"))
    rc = cli.main(["check", "--prove", "--trials", "100", "--counterexamples", str(tmp_path / "cx"), str(path)])
    err = capsys.readouterr().err
    assert rc == 0
    assert f"{path}:3:16: warning[W702]: s: all_wrong_unchanged over binary refuted: group of 1: reward [0]" in err


def test_prove_without_z3_names_the_extra(tmp_path, capsys, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_z3(name, *a, **k):
        if name == "z3":
            raise ImportError("no z3")
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_z3)
    path = tmp_path / "s.shape"
    path.write_text(spec("term bonus = 0.5"))
    assert cli.main(["check", "--prove", str(path)]) == 2
    assert "pip install 'shapec[prove]'" in capsys.readouterr().err


def test_plain_check_leaves_undecided_clauses_to_prove_and_never_imports_z3(tmp_path):
    import subprocess
    import sys

    path = tmp_path / "s.shape"
    path.write_text(spec("ensure order_kept", PENALTY))  # refuted by --prove, undecided by intervals
    code = (f"import sys, shapec.cli as c; rc = c.main(['check', '-q', {str(path)!r}]); "
            "assert 'z3' not in sys.modules; sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")


def plain_check(tmp_path, source: str) -> tuple[int, list[dict]]:
    import contextlib
    import io

    path = tmp_path / "s.shape"
    path.write_text(source)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = cli.main(["check", "--format", "json", str(path)])
    return rc, json.loads(buf.getvalue())


# (code, bad source, snippet under the caret, words of the message, corrected source)
STATIC_CASES = [
    ("E703", spec("ensure order_kept", "term pen = -2 on reward > 0"), "ensure order_kept",
     "a wrong rollout ends in [0, 0] and a correct one in [-1, -1]",
     spec("ensure order_kept", "term pen = -2 on reward > 0", "clamp >= 0")),
    ("E704", spec("ensure all_wrong_unchanged", "term bonus = 0.5"), "ensure all_wrong_unchanged",
     "an all-zero group ends in [0.5, 0.5]", spec("ensure all_wrong_unchanged", "term bonus = 0.5 on reward > 0")),
    ("E705", spec("ensure within [0, 1]", "term bonus = 2"), "ensure within",
     "every shaped reward lies in [2, 3], outside [0, 1]", spec("ensure within [0, 3]", "term bonus = 2")),
]


@pytest.mark.parametrize("code, bad, snippet, words, good", STATIC_CASES, ids=[c[0] for c in STATIC_CASES])
def test_plain_check_reports_what_the_static_pass_refutes(tmp_path, code, bad, snippet, words, good):
    rc, diags = plain_check(tmp_path, bad)
    assert rc == 1 and [d["code"] for d in diags] == [code]
    assert (diags[0]["line"], diags[0]["column"]) == position(bad, snippet)
    assert words in diags[0]["message"] and "--prove" in diags[0]["message"]
    assert plain_check(tmp_path, good) == (0, [])


def test_static_pass_proves_under_a_when_but_never_refutes_one(tmp_path):
    from shapec import compile_str
    from shapec.analysis.static import decide

    head = "shaper s(w: float = 1) requires binary produces real {\n  input t: tokens\n"
    ir = compile_str(spec("ensure order_kept when w >= -1", "term pen = w on reward > 0", head=head),
                     backend="interpreter").ir("s")
    assert decide(ir, ir.ensures[0]) == ("proved", "static, every group size: a wrong rollout ends in [0, 0] "
                                         "and a correct one in [0, inf]")
    # every correct rollout ends below 0 when w < -1, but a `when` might hold for no param value at all,
    # so the clause is left to --prove rather than refuted
    assert plain_check(tmp_path, spec("ensure order_kept when w < -1", "term pen = w on reward > 0"))[0] == 0


def test_shorter_not_worse_mask_is_optional_and_only_for_it():
    assert_ok(spec("ensure shorter_not_worse(t)", "term pen = -float(t) / 1000"))
    assert_error(spec("ensure order_kept on reward > 0"), "E702", "ensure", message="`ensure order_kept`")


PIPELINE_ONLY = ("import dapo\nimport thinkprune\n"
                 "pipeline p = thinkprune.truncate(limit=6000) >> dapo.overlong(max_length=8000, cache=2000)\n")


def test_a_file_with_only_a_pipeline_proves_each_stage_at_the_arguments_it_is_called_with(tmp_path, capsys):
    path = tmp_path / "p.shape"
    path.write_text(PIPELINE_ONLY)
    rc = cli.main(["check", "--prove", "--trials", "200", "--counterexamples", str(tmp_path / "cx"), str(path)])
    out, err = capsys.readouterr()
    assert rc == 0
    assert ("pipeline p, stage overlong: order_kept over binary [declared (under its `when`, called with "
            "max_length=8000, cache=2000)]: proved") in out
    assert "pipeline p, stage truncate: within [0, 1] over binary [declared (called with limit=6000)]: proved" in out
    assert out.splitlines()[-1].startswith("1 file: 9 properties: ")
    line, col = position(PIPELINE_ONLY, "dapo.overlong(")
    assert f"{path}:{line}:{col}: warning[W702]: pipeline p, stage overlong: all_wrong_unchanged" in err
    cx = tmp_path / "cx" / "p.overlong.all_wrong_unchanged.jsonl"
    assert cx.exists() and "max_length=8000" in err and "--set cache=2000" in err


def test_prove_says_when_a_file_has_nothing_to_prove(tmp_path, capsys):
    path = tmp_path / "empty.shape"
    path.write_text('"""Only a docstring."""\n')
    assert cli.main(["check", "--prove", str(path)]) == 0
    assert capsys.readouterr().out.strip() == "1 file: no shaper or pipeline stage to prove"


def test_a_when_the_defaults_do_not_meet_is_warned_with_a_counterexample_at_the_defaults(tmp_path):
    bad = spec("ensure order_kept when w == 0", PENALTY, head=HEAD.replace("float = 1", "float >= 0 = 1"))
    rc, diags, props = prove(tmp_path, bad)
    (w705,) = diags
    assert w705["message"].startswith("s: order_kept over binary is declared under a `when` the defaults do not "
                                      "meet (w = 1), and at the defaults it is refuted: group of ")
    assert "params defaults -> shaped" in w705["message"]
    path = tmp_path / "cx" / "s.order_kept.defaults.jsonl"
    assert f"--data {path}" in w705["message"] and path.is_file()
    assert [p["declared"] for p in props if p["property"] == "order_kept over binary"] == [True, False, False]


def test_a_when_false_at_the_defaults_where_the_property_holds_anyway_is_not_warned(tmp_path):
    source = spec("ensure order_kept when w == 0", "term bonus = 0.1 * w on reward > 0",
                  head=HEAD.replace("float = 1", "float >= 0 = 1"))
    rc, diags, props = prove(tmp_path, source)
    assert (rc, diags) == (0, [])
    assert [p["status"] for p in props if p["property"] == "order_kept over binary"][-1] == "proved"
