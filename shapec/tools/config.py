"""Params from YAML configs and `--set key=value`, validated by the shapers' generated models.

A config maps shaper names (or, for a pipeline, stage names) to params:

    length_penalty:
      longest_total_penalty: 0.2

NeMo-RL's own config is accepted as it is: a top-level `grpo` block whose `length_penalty`
and `time_efficiency` blocks are mapped to the params of the stdlib stages of the same name
(global bands, implicitly enabled band channels and per-agent overrides included).
"""

from __future__ import annotations

import difflib
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from ..paths import printable
from ..runtime.params import ParamError, validate_params
from ..run.spec import ToolError, stage_irs

GRPO_BLOCKS = ("length_penalty", "time_efficiency")  # the blocks of a NeMo-RL `grpo` that map to stages
MAX_LISTED = 8  # blocks named in a message; the rest are counted


def _hint(key: str, options, both: bool = False) -> str:
    """'; did you mean X?' for a close match, else (or also, with both) the valid keys."""
    options = [str(o) for o in options]
    close = difflib.get_close_matches(str(key), options, n=1)
    mean = f"; did you mean {close[0]!r}?" if close else ""
    if close and not both:
        return mean
    return f"{mean}; valid keys: {', '.join(options)}" if options else mean


@dataclass
class ParamPlan:
    """Params per stage, plus per-agent overrides that become per-group param columns."""

    shaper: Any
    base: dict[str, dict[str, Any]]
    agents: dict[str, dict[str, dict[str, Any] | None]] = field(default_factory=dict)
    length_type: str | None = None
    group_size: int | None = None
    field_map: list[tuple[str, str, Any]] = field(default_factory=list)  # the config's map: (where, name, field)
    _warned: set = field(default_factory=set)

    @property
    def stage_names(self) -> list[str]:
        return [ir.name for ir in stage_irs(self.shaper)]

    @property
    def uses_agents(self) -> bool:
        return any(self.agents.values())

    def params(self, agents: list[str | None] | None = None) -> dict[str, Any]:
        """The `params=` argument for one call; `agents` names each group's agent."""
        per_stage: dict[str, dict[str, Any]] = {}
        for ir in stage_irs(self.shaper):
            base = dict(self.base.get(ir.name, {}))
            overrides = self.agents.get(ir.name) or {}
            if overrides and agents is not None:
                resolved = validate_params(ir, base)
                rows = [self._resolve(ir.name, overrides, a) for a in agents]
                for key in sorted({k for o in overrides.values() if o for k in o}):
                    base[key] = [row.get(key, resolved[key]) for row in rows]
            per_stage[ir.name] = base
        if not self.shaper.is_pipeline:
            return per_stage[self.stage_names[0]]
        return per_stage

    def _resolve(self, stage: str, overrides: dict, agent: str | None) -> dict:
        """NeMo-RL's rule: an agent's override replaces only the keys it sets; none means defaults."""
        if agent not in overrides:
            if agent not in self._warned:
                self._warned.add(agent)
                print(f"shapec: warning: agent {agent!r} not found in agent_overrides of {stage!r}, "
                      f"falling back to defaults", file=sys.stderr)
            return {}
        return dict(overrides[agent] or {})


MAX_YAML_VALUES = 1_000_000  # far past any real config; a NeMo-RL one holds a few hundred


def bounded(value: Any, where: str) -> None:
    """Refuse a YAML value that stands for more values than MAX_YAML_VALUES: aliases repeat a value
    without copying it, so nine lines of nested aliases make a billion values (and a list may hold
    itself), which validating, or printing in an error, would walk for ever."""
    stack, seen = [value], 0
    while stack:
        v = stack.pop()
        seen += 1
        if seen > MAX_YAML_VALUES:
            raise ToolError(f"{where}: the YAML stands for more than {MAX_YAML_VALUES:,} values (its aliases "
                            "repeat values, or a value holds itself); write the values out")
        if isinstance(v, dict):
            stack.extend(v.keys())
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)


def yaml_value(text: str, where: str) -> Any:
    """One YAML value given on the command line (`--set`, `--meta`), or one error line: the YAML
    reader's own message spans lines with a snippet, and deep nesting exhausts Python's stack."""
    import yaml

    from . import yaml12

    try:
        value = yaml12.load(text)
    except RecursionError:
        raise ToolError(f"{where}: value is not valid YAML (nested too deeply)") from None
    except yaml.YAMLError as err:
        raise ToolError(f"{where}: value is not valid YAML ({getattr(err, 'problem', None) or 'unreadable'})") \
            from None
    bounded(value, where)
    return value


def parse_set(items: list[str]) -> list[tuple[str, Any]]:
    """`key=value` pairs; values are YAML 1.2 (so `0.2`, `1e-3`, `true`, `[1, 2]`, `null` mean what they say)."""
    out = []
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ToolError(f"--set {item!r}: expected key=value")
        out.append((key.strip(), yaml_value(raw, f"--set {item!r}") if raw.strip() else ""))
    return out


def module_keys(module) -> dict[str, frozenset[str]]:
    """What a config may set under each shaper or pipeline of a module: params, or stage names."""
    keys = {}
    for name in module.names():
        ir = module.ir(name)
        stages = getattr(ir, "stages", None)
        keys[name] = frozenset(s.name for s, _ in stages) if stages is not None else frozenset(p.name for p in ir.params)
    return keys


def build_plan(shaper, module_names: Mapping[str, frozenset[str]] | tuple[str, ...] = (),
               config: str | Path | None = None, sets: list[str] | None = None) -> ParamPlan:
    """Read the config (if any), apply `--set` overrides and validate every stage's params.

    `module_names` names the module's other shapers (a config for the whole module may set
    them too); given as `module_keys(module)`, their blocks are checked for unknown keys as well.
    Every error of the config is reported at once, one line each with its key path.
    """
    plan = ParamPlan(shaper, {name: {} for name in [ir.name for ir in stage_irs(shaper)]})
    errors: list[str] = []
    if config is not None:
        _load_config(plan, Path(config), module_names, errors)
    before = {stage: dict(values) for stage, values in plan.base.items()}
    for key, value in parse_set(sets or []):
        _apply_set(plan, key, value)
    _validate(plan, printable(config) if config else "--set" if sets else "params", errors)
    if errors:
        raise ToolError("\n".join(dict.fromkeys(errors)))
    _warn_as_nemo_rl(plan, before)
    return plan


def _warn_as_nemo_rl(plan: ParamPlan, before: dict[str, dict]) -> None:
    """A `--set` value for NeMo-RL's length penalty that NeMo-RL's config accepts and its code fails on
    gets the warning the drop-in and a config give it (a config's own values were warned as read)."""
    from ..api import STDLIB
    from ..run.nemo_rl_config import fail_closed_values

    for ir in stage_irs(plan.shaper):
        if Path(ir.filename).resolve() != (STDLIB / "nemo_rl.shape").resolve() or ir.name != "length_penalty":
            continue
        values = plan.base.get(ir.name, {})
        keys = ("top_percentile", "profiled_length_min_samples")
        if all(values.get(k) == before.get(ir.name, {}).get(k) for k in keys):
            continue
        resolved = validate_params(ir, values)
        for message in fail_closed_values(*(resolved[k] for k in keys)):
            warnings.warn(message, stacklevel=2)


def _load_config(plan: ParamPlan, path: Path, module_names, errors: list[str]) -> None:
    import yaml

    from . import yaml12

    try:
        raw = path.read_bytes()
        data = yaml12.load(raw.decode("utf-8"))
    except OSError as err:
        raise ToolError(f"{printable(path)}: cannot read config ({err.strerror})") from None
    except UnicodeDecodeError as err:
        raise ToolError(f"{printable(path)}: cannot read config: not UTF-8 "
                        f"(byte 0x{raw[err.start]:02x} at offset {err.start})") from None
    except RecursionError:
        raise ToolError(f"{printable(path)}: not valid YAML: nested too deeply") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{printable(path)}:{mark.line + 1}:{mark.column + 1}" if mark is not None else printable(path)
        problem = getattr(err, "problem", None) or str(err)
        raise ToolError(f"{where}: not valid YAML: {problem}") from None
    bounded(data, printable(path))
    if data is None:
        return
    if not isinstance(data, Mapping):
        raise ToolError(f"{printable(path)}: expected a mapping of shaper names to params, got {type(data).__name__}")
    stages = plan.stage_names
    nemo = "grpo" in data
    read = False  # whether the shaper reads any block of the config
    for key, value in data.items():
        try:
            if key == "grpo":
                read = _load_grpo(plan, path, value, errors) or read
            elif key in stages:
                read = True
                if value is None:
                    continue
                if not isinstance(value, Mapping):
                    raise ToolError(f"{printable(path)}: {printable(key)}: expected a mapping of params, "
                                    f"got {type(value).__name__}")
                plan.base[key].update(value)
            elif key in module_names:
                _check_other_block(path, key, value, module_names, errors)
            elif key == "map":  # where inputs and metadata are read from (run/fieldmap.py)
                read = True
                if not isinstance(value, Mapping):
                    raise ToolError(f"{printable(path)}: map: expected a mapping of input or metadata names to "
                                    f"fields, got {type(value).__name__}")
                plan.field_map = [(f"{printable(path)}: map.{printable(str(k))}", str(k), v) for k, v in value.items()]
            elif not nemo:  # the rest of a NeMo-RL config is not shapec's
                valid = list(dict.fromkeys([*stages, *module_names, "grpo", "map"]))
                raise ToolError(f"{printable(path)}: unknown key {key!r}{_hint(key, valid, both=True)}")
        except ToolError as err:
            errors.append(str(err))
    if data and not read and not errors:
        errors.append(_unread(plan, path, data))


def _unread(plan: ParamPlan, path: Path, data: Mapping) -> str:
    """A config none of whose blocks the shaper reads sets nothing, silently (a later NeMo-RL's
    `grpo.length_bonus` for `length_penalty`): the blocks it has, and the closest it could have."""
    grpo = data.get("grpo") if isinstance(data.get("grpo"), Mapping) else {}
    found = [*(str(k) for k in data if k != "grpo"), *(f"grpo.{k}" for k in grpo)] or ["grpo"]
    blocks = [b for b in GRPO_BLOCKS if any(b in name for name in plan.stage_names)]
    valid = [*plan.stage_names, *(f"grpo.{b}" for b in blocks)]
    close = [(difflib.SequenceMatcher(None, key.rpartition(".")[2], name.rpartition(".")[2]).ratio(), key, name)
             for key in found for name in valid if key.startswith("grpo.") == name.startswith("grpo.")]
    ratio, key, name = max(close, default=(0.0, "", ""))
    hint = f"; did you mean {name!r} for {key!r}?" if ratio >= 0.6 else f"; it reads {', '.join(map(repr, valid))}"
    shown = ", ".join(map(printable, found[:MAX_LISTED])) + (f", ... and {len(found) - MAX_LISTED} more"
                                                             if len(found) > MAX_LISTED else "")
    return f"{printable(path)}: {plan.shaper.name!r} reads nothing from this config, which has {shown}{hint}"


def _check_other_block(path: Path, key: str, value: Any, module_names, errors: list[str]) -> None:
    """A block for another shaper of the module is not used by this run, but a typo in it is still one."""
    if not isinstance(module_names, Mapping) or value is None:
        return
    if not isinstance(value, Mapping):
        errors.append(f"{printable(path)}: {printable(key)}: expected a mapping of params, got {type(value).__name__}")
        return
    known = sorted(module_names[key])
    for name in value:
        if name not in known:
            errors.append(f"{printable(path)}: {printable(key)}.{printable(name)}: unknown param of {key!r}"
                          f"{_hint(name, known, both=True)}")


def _stage_named(plan: ParamPlan, path: Path, block: str) -> str:
    names = plan.stage_names
    if block in names:
        return block
    matches = [n for n in names if block in n]
    if len(matches) == 1:
        return matches[0]
    raise ToolError(f"{printable(path)}: grpo.{block} is set but {plan.shaper.name!r} has no {block} stage "
                    f"(stages: {', '.join(names)})")


def _load_grpo(plan: ParamPlan, path: Path, grpo: Any, errors: list[str]) -> bool:
    """Load the `grpo` blocks that map to stages; whether there was one."""
    if grpo is None:
        return False
    if not isinstance(grpo, Mapping):
        raise ToolError(f"{printable(path)}: grpo: expected a mapping, got {type(grpo).__name__}")
    size = grpo.get("num_generations_per_prompt")
    if size is not None:
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ToolError(f"{printable(path)}: grpo.num_generations_per_prompt: expected a positive integer, "
                            f"got {size!r}")
        plan.group_size = size
    loads = {"length_penalty": _load_length_penalty, "time_efficiency": _load_time_efficiency}
    present = [block for block in GRPO_BLOCKS if grpo.get(block) is not None]
    for block in present:
        try:
            loads[block](plan, path, _stage_named(plan, path, block), grpo[block])
        except ToolError as err:
            errors.append(str(err))
    return bool(present)


def _mapping(value: Any, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ToolError(f"{where}: expected a mapping, got {type(value).__name__}")
    return dict(value)


def _first_error(err, where: str) -> ToolError:
    """Every error of a block at once, one line each with its key path."""
    lines = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"])
        lines.append(f"{where}{'.' + loc if loc else ''}: {e['msg'].removeprefix('Value error, ')}")
    return ToolError("\n".join(lines))


def _load_length_penalty(plan: ParamPlan, path: Path, stage: str, block: Any) -> None:
    """grpo.length_penalty -> params of the stdlib length_penalty shaper, resolved as NeMo-RL does.

    `default` sets the params (its `length_type` selects how lengths are counted), the
    channels under an enabled `profile_band.defaults` become global bands and are enabled
    unless `default` sets their flag, and `agent_overrides` become per-group params by agent.
    """
    from pydantic import ValidationError

    from ..run.nemo_rl_config import LengthPenaltyConfig, default_params, global_bands

    where = f"{printable(path)}: grpo.length_penalty"
    try:
        cfg = LengthPenaltyConfig.model_validate(_mapping(block, where))
    except ValidationError as err:
        raise _first_error(err, where) from None
    bands = global_bands(cfg)
    params = default_params(cfg, bands)
    plan.length_type = params.pop("length_type")
    params.update({f"global_band_{ch}": abf for ch, abf in bands.items()})
    plan.base[stage].update(params)
    if cfg.agent_overrides:
        agents: dict[str, dict | None] = {}
        for agent, override in cfg.agent_overrides.items():
            values = override.model_dump(exclude_unset=True) if override is not None else None
            if values and values.pop("length_type", plan.length_type) != plan.length_type:
                raise ToolError(f"{where}.agent_overrides.{agent}.length_type: a per-agent length_type is not "
                                f"supported; lengths are counted once, in {plan.length_type}")
            agents[str(agent)] = values
        plan.agents[stage] = agents


def _load_time_efficiency(plan: ParamPlan, path: Path, stage: str, block: Any) -> None:
    """grpo.time_efficiency -> params of the time_efficiency stage (same names).

    NeMo-RL keeps unknown keys of this block and ignores them; so does shapec, with a warning
    that names the closest known key.
    """
    from pydantic import ValidationError

    from ..run.nemo_rl_config import TimeEfficiencyConfig

    where = f"{printable(path)}: grpo.time_efficiency"
    try:
        cfg = TimeEfficiencyConfig.model_validate(_mapping(block, where))
    except ValidationError as err:
        raise _first_error(err, where) from None
    for key in cfg.model_extra or {}:
        print(f"shapec: warning: {where}: unknown key {key!r} ignored{_hint(key, list(type(cfg).model_fields))}",
              file=sys.stderr)
    values = {k: v for k, v in cfg.model_dump(exclude_unset=True).items() if k in type(cfg).model_fields}
    names = {p.name for ir in stage_irs(plan.shaper) if ir.name == stage for p in ir.params}
    if not values.pop("enabled", True) and "enabled" not in names:
        raise ToolError(f"{where}.enabled is false, but {plan.shaper.name!r} always runs its {stage!r} stage; "
                        f"run a shaper without it instead")
    plan.base[stage].update(values)


def _apply_set(plan: ParamPlan, key: str, value: Any) -> None:
    stages = plan.stage_names
    stage, dot, name = key.partition(".")
    if dot and stage in stages:
        plan.base[stage][name] = value
        return
    if dot:
        raise ToolError(f"--set {key}: unknown stage {stage!r}{_hint(stage, stages)}")
    owners = [ir.name for ir in stage_irs(plan.shaper) if key in {p.name for p in ir.params}]
    if len(stages) == 1 or len(owners) == 1:
        plan.base[owners[0] if owners else stages[0]][key] = value
        return
    if not owners:
        every = sorted({p.name for ir in stage_irs(plan.shaper) for p in ir.params})
        raise ToolError(f"--set {key}: no stage has a param {key!r}{_hint(key, every)}")
    raise ToolError(f"--set {key}: several stages have {key!r} ({', '.join(owners)}); write STAGE.{key}=...")


def _validate(plan: ParamPlan, source: str, errors: list[str]) -> None:
    for ir in stage_irs(plan.shaper):
        base = plan.base.get(ir.name, {})
        checks = [(base, f"{source}: {ir.name}: ")]
        checks += [({**base, **(override or {})}, f"{source}: {ir.name}: agent {agent!r}: ")
                   for agent, override in (plan.agents.get(ir.name) or {}).items()]
        for values, prefix in checks:
            try:
                validate_params(ir, values, prefix)
            except ParamError as err:
                errors.append(str(err) + (f"; give it with --set {err.required}=VALUE" if err.required else ""))
