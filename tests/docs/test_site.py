"""The docs site: generated pages up to date, a strict mkdocs build, valid spec snippets, the lexer."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from pygments.lexers import get_lexer_by_name, get_lexer_for_filename
from pygments.token import Error

import shapec
from shapec.checker.codes import CODES
from shapec import docgen

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
OWN_PAGES = ("index.md", "tutorial-nemo-rl.md", "writing-a-shaper.md", "cli.md")


@pytest.mark.parametrize("page", sorted(docgen.PAGES))
def test_generated_pages_are_up_to_date(page):
    expected = docgen.PAGES[page]()
    assert (DOCS / page).read_text() == expected, f"run `python -m shapec.docgen` to refresh docs/{page}"


def test_error_reference_lists_every_code():
    text = (DOCS / "errors.md").read_text()
    for code, meaning in CODES.items():
        assert f"| `{code}` | {meaning} |" in text


def test_stdlib_reference_covers_every_shaper_and_pipeline():
    text = (DOCS / "stdlib.md").read_text()
    for path in sorted((ROOT / "shapec" / "stdlib").glob("*.shape")):
        module = shapec.compile_file(path, backend="interpreter")
        for name in module.shapers:
            assert f"### `{path.stem}.{name}`" in text
        for name in module.pipelines:
            assert f"### pipeline `{path.stem}.{name}`" in text


def test_the_cli_guide_names_every_command_and_every_stdlib_module():
    text = (DOCS / "cli.md").read_text()
    summary = text.split("```text\n", 1)[1].split("```", 1)[0]
    from shapec.cli import build_parser

    commands = re.search(r"\{([a-z,]+)\}", build_parser().format_usage()).group(1).split(",")
    assert sorted(line.split()[1] for line in summary.splitlines()) == sorted(commands)
    spec_names = text.split("`SPEC` is a `.shape` file", 1)[1].split("\n\n", 1)[0]
    for path in (ROOT / "shapec" / "stdlib").glob("*.shape"):
        assert f"`{path.stem}`" in spec_names


def test_mkdocs_build_strict(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "site" / "writing-a-shaper" / "index.html").read_text()
    # ```shape blocks are highlighted by shapec's Pygments lexer: keywords and types get classes
    assert '<span class="kd">shaper</span>' in page and '<span class="kt">tokens</span>' in page


def test_every_docs_page_is_in_the_nav():
    import yaml

    class Loader(yaml.SafeLoader):
        """mkdocs.yml may hold `!!python/name:` tags; the nav needs none of them."""

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    nav = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader)["nav"]

    def pages(items):
        for item in items:
            value = next(iter(item.values())) if isinstance(item, dict) else item
            yield from pages(value) if isinstance(value, list) else [value]

    assert sorted(pages(nav)) == sorted(p.name for p in DOCS.glob("*.md"))


def _shape_blocks(text: str) -> list[str]:
    return re.findall(r"```shape\n(.*?)```", text, flags=re.S)


@pytest.mark.parametrize("page", OWN_PAGES)
def test_spec_snippets_check_clean(page):
    blocks = _shape_blocks((DOCS / page).read_text())
    for block in blocks:
        assert shapec.check_source(block, str(DOCS / "snippet.shape")) == [], block


def test_lexer_is_registered_and_lexes_every_stdlib_spec_without_errors():
    lexer = get_lexer_by_name("shape")
    assert type(get_lexer_for_filename("x.shape")) is type(lexer)
    for path in sorted((ROOT / "shapec" / "stdlib").glob("*.shape")):
        bad = [value for token, value in lexer.get_tokens(path.read_text()) if token is Error]
        assert bad == [], (path.name, bad[:5])


def test_docgen_reads_its_command_line(tmp_path, capsys):
    """`--help` was taken for the docs folder (a traceback writing --help/errors.md)."""
    with pytest.raises(SystemExit) as stop:
        docgen.main(["--help"])
    assert stop.value.code == 0 and "regenerate errors.md" in capsys.readouterr().out
    with pytest.raises(SystemExit) as stop:
        docgen.main([str(tmp_path / "nope")])
    assert stop.value.code == 2 and "not a folder" in capsys.readouterr().err
    assert docgen.main([str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(docgen.PAGES)
