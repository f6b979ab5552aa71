"""`shapec plot` of a shaper whose reward reads metadata with nothing standing in for it needs that
metadata: without `--meta` the plot is refused naming the read and the option, never drawn flat."""

from __future__ import annotations

from .test_cli_errors import shapec_cli


def test_plot_without_metadata_a_reward_reads_names_it_and_the_meta_option(tmp_path, capsys):
    rc, _, err = shapec_cli(capsys, "plot", "l1", "--shaper", "l1_exact", "--out", tmp_path / "p.png")
    assert rc == 1 and not (tmp_path / "p.png").exists()
    assert err.startswith("shapec: error: cannot shape the plotted group: metadata 'target' (`meta target: tokens`): "
                          "shaper 'l1_exact' reads it (target at "), err
    assert err.endswith("with nothing standing in for it; give it with --meta target=VALUE\n"), err
    rc, _, err = shapec_cli(capsys, "plot", "l1", "--shaper", "l1_exact", "--out", tmp_path / "p.png",
                            "--meta", "target=1000")
    assert rc == 0, err
