"""YAML as configs and `--set` values mean it: the YAML 1.2 core schema, keys written once.

PyYAML resolves plain scalars by YAML 1.1, where `1e-3` is a string, `010` is 8, `1:30` is 90 and
`no` is false and a date is a datetime; the 1.2 core schema (what OmegaConf-era configs and JSON expect) has none of that.
The loader below replaces the implicit resolvers for null, bool, int and float with the 1.2 core
ones, through PyYAML's public resolver and constructor API, and refuses a key written twice.
"""

from __future__ import annotations

import re

import yaml

TIMESTAMP = "tag:yaml.org,2002:timestamp"  # not in the core schema: a date stays a string
CORE = {
    "tag:yaml.org,2002:null": (r"^(?:~|null|Null|NULL|)$", list("~nN") + [""]),
    "tag:yaml.org,2002:bool": (r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    "tag:yaml.org,2002:int": (r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", list("-+0123456789")),
    "tag:yaml.org,2002:float": (r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
                                r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$", list("-+.0123456789")),
}


class Loader(yaml.SafeLoader):
    """SafeLoader with the YAML 1.2 core schema for plain scalars and no duplicate keys."""

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag not in CORE and tag != TIMESTAMP]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def construct_yaml_int(self, node):
        text = self.construct_scalar(node)
        if text.startswith("0o"):
            return int(text[2:], 8)
        return int(text, 16) if text.startswith("0x") else int(text, 10)

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *anchor`, merged by the base class
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:  # a mapping or a list as a key: no config has one
                raise yaml.constructor.ConstructorError(
                    None, None, f"a key must be a name or a number, not a {type(key).__name__}",
                    key_node.start_mark) from None
            if first is not key_node:
                same = "" if first.value == key_node.value else f", equal to the earlier key {first.value!r}"
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key_node.value!r}{same} (the later value would silently win)",
                    key_node.start_mark)
        return super().construct_mapping(node, deep)


for _tag, (_pattern, _first) in CORE.items():
    Loader.add_implicit_resolver(_tag, re.compile(_pattern), _first)
Loader.add_constructor("tag:yaml.org,2002:int", Loader.construct_yaml_int)


def load(text: str):
    return yaml.load(text, Loader=Loader)
