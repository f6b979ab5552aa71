"""Configs and `--set` values are YAML 1.2: numbers read as JSON numbers, no 1.1 surprises."""

import math

import pytest

from shapec.tools.config import parse_set
from shapec.tools.yaml12 import load

CORE = [
    ("1e-3", 0.001), ("-2.5E+2", -250.0), (".5", 0.5), ("1.", 1.0), ("+3", 3), ("010", 10), ("0o17", 15),
    ("0x1F", 31), ("true", True), ("False", False), ("null", None), ("~", None), (".inf", math.inf),
    ("-.Inf", -math.inf), ("[1, 2.5e3]", [1, 2500.0]),
]
# what YAML 1.1 made of these: 90, False, True, 1000, a date
STRINGS = ["1:30", "no", "yes", "on", "1_000", "2026-01-01", "0b11"]


@pytest.mark.parametrize("text, value", CORE, ids=[t for t, _ in CORE])
def test_plain_scalars_mean_what_the_core_schema_says(text, value):
    got = load(text)
    assert got == value and type(got) is type(value)


@pytest.mark.parametrize("text", STRINGS)
def test_what_yaml_1_1_turned_into_numbers_bools_or_dates_stays_a_string(text):
    assert load(text) == text


def test_nan_is_a_float():
    assert math.isnan(load(".nan"))


def test_set_reads_its_values_as_yaml_1_2():
    assert parse_set(["k=1e-3", "n=010", "t=1:30"]) == [("k", 0.001), ("n", 10), ("t", "1:30")]


def test_a_key_written_twice_is_an_error():
    import yaml

    with pytest.raises(yaml.constructor.ConstructorError, match="duplicate key 'a'"):
        load("a: 1\nb: 2\na: 3\n")
