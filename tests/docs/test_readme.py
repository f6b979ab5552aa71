"""The README's spec compiles and does what its comments say."""

import re
from pathlib import Path

import shapec

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()


def test_readme_spec_checks_and_runs():
    (block,) = re.findall(r"```shape\n(.*?)```", README, re.S)
    assert shapec.check_source(block) == []
    s = shapec.compile_str(block, backend="interpreter").short_rl
    out = s([1.0, 1.0, 0.0], group_size=3, channels={"correct": [1, 1, 0], "length": [100, 500, 50]})
    # accuracy 2/3 is the best so far: the switch is on. lo 100, hi 500: 100 is within tau_l (0.5);
    # 500 gets 0.5 - 400 / (400 + 1e-5); the wrong rollout gets nothing
    assert out.rewards.tolist() == [1.5, 1.0 + 0.5 - 400 / (400 + 1e-5), 0.0]
