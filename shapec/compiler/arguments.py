"""A kernel's arguments: what a call hands the compiled function, in order, and the kernel's name
for each input. Planned from the general IR of a shaper, so every specialisation of it takes the
same call (specialize.py); the runtime binds a batch to this plan (runtime/kernel.py) and the
lowering names its reads after it (lowering/arguments.py)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.nodes import Op, ShaperIR, steps_nodes, walk
from .lowering.names import Namer


@dataclass(frozen=True)
class Arg:
    """One kernel argument: its name in the kernel, where it comes from, and its numba type."""

    name: str
    source: str  # rewards env_rewards offsets components use_components nthreads input meta band list_offsets list_field params (key: the names packed) state prompt_state
    key: object = None
    numba_type: str = "nt.float64[::1]"


@dataclass
class ArgumentPlan:
    """The arguments, and the kernel name of each input, metadata field, list and state."""

    args: list[Arg] = field(default_factory=list)
    input_names: dict[str, str] = field(default_factory=dict)
    meta_names: dict[str, str] = field(default_factory=dict)
    band_names: dict[str, str] = field(default_factory=dict)
    list_offsets: dict[str, str] = field(default_factory=dict)
    list_sizes: dict[str, str] = field(default_factory=dict)
    list_fields: dict[str, str] = field(default_factory=dict)
    param_rows: dict[str, int] = field(default_factory=dict)
    param_band_rows: dict[str, int] = field(default_factory=dict)
    state_names: dict[str, str] = field(default_factory=dict)
    prompt_state_rows: dict[str, int] = field(default_factory=dict)  # per-prompt state -> its row


def plan_arguments(ir: ShaperIR, namer: Namer, parallel: bool) -> ArgumentPlan:
    """The kernel's struct-of-arrays arguments: the batch's arrays, then the metadata the IR reads
    (in the order it first reads them), the packed params, the state, and the outputs."""
    plan = ArgumentPlan()
    a, new = plan.args, namer.new
    a += [Arg("rewards", "rewards"), Arg("env_rewards", "env_rewards"),
          Arg("offsets", "offsets", numba_type="nt.int64[::1]"), Arg("components", "components"),
          Arg("use_components", "use_components", numba_type="nt.boolean")]
    if parallel:  # read in Python: numba.get_num_threads() inside a kernel defeats its cache
        a.append(Arg("nthreads", "nthreads", numba_type="nt.int64"))
    for name, _ in ir.inputs:
        plan.input_names[name] = new("in", name)
        a.append(Arg(plan.input_names[name], "input", name))
    metas, bands, lists = [], [], []
    for node in steps_nodes(ir):
        for n in walk(node):
            if n.op is Op.REF and n.attr[0] == "meta" and n.attr[1] not in metas:
                metas.append(n.attr[1])
            elif n.op is Op.BANDREF and n.attr[0] == "meta" and n.attr[1] not in bands:
                bands.append(n.attr[1])
            elif n.op is Op.REF and n.attr[0] == "item":
                lst = n.attr[1].split(".", 1)[0]
                if lst not in lists:
                    lists.append(lst)
            elif n.op is Op.REDUCE and n.attr[1] and n.attr[1] not in lists:
                lists.append(n.attr[1])
    plan.meta_names.update((p, new("m", p)) for p in metas)
    plan.band_names.update((p, new("bd", p)) for p in bands)
    a += [Arg(v, "meta", p) for p, v in plan.meta_names.items()]
    a += [Arg(v, "band", p, "nt.float64[:, ::1]") for p, v in plan.band_names.items()]
    spec = {m.name: m for m in ir.metas}
    for lst in lists:
        plan.list_offsets[lst] = new("lo", lst)
        plan.list_sizes[lst] = new("ni", lst)
        a.append(Arg(plan.list_offsets[lst], "list_offsets", lst, "nt.int64[::1]"))
        for fld, _ in spec[lst].fields:
            plan.list_fields[f"{lst}.{fld}"] = new("lf", f"{lst}_{fld}")
            a.append(Arg(plan.list_fields[f"{lst}.{fld}"], "list_field", (lst, fld)))
    # params packed: one (P, G) matrix of the scalar ones, one (B, G, 4) array of the bands (two
    # arguments to unbox per call, not one per param; the caller stacks them once per params)
    scalars = tuple(ps.name for ps in ir.params if ps.kind != "band")
    bands_p = tuple(ps.name for ps in ir.params if ps.kind == "band")
    plan.param_rows.update((name, k) for k, name in enumerate(scalars))
    plan.param_band_rows.update((name, k) for k, name in enumerate(bands_p))
    if scalars:
        a.append(Arg("params", "params", scalars, "nt.float64[:, ::1]"))
    if bands_p:
        a.append(Arg("param_bands", "params", bands_p, "nt.float64[:, :, ::1]"))
    plan.state_names.update((name, new("st", name)) for name, _ in ir.states)
    a.append(Arg("state_in", "state"))
    plan.prompt_state_rows.update((name, k) for k, (name, _, _) in enumerate(ir.prompt_states))
    if ir.prompt_states:  # (S, G): each state's value as each group's prompt entered the call
        a.append(Arg("prompt_state_in", "prompt_state", numba_type="nt.float64[:, ::1]"))
    a.append(Arg("keep", "breakdown", numba_type="nt.boolean"))  # store terms and factors
    # outputs, allocated by numpy (whose large arrays get transparent huge pages) and filled here
    a += [Arg("out", "out"), Arg("terms", "out_terms", numba_type="nt.float64[:, ::1]"),
          Arg("factors", "out_factors", numba_type="nt.float64[:, ::1]"),
          Arg("skip", "out_skip", numba_type="nt.int64[::1]"),
          Arg("gates", "out_gates", numba_type="nt.int64[:, ::1]"), Arg("metrics", "out_metrics")]
    if ir.drop is not None:
        a.append(Arg("kept", "out_kept", numba_type="nt.boolean[::1]"))
    if ir.prompt_states:  # (S, G): the values entering, where the kernel writes each shaped group's update
        a.append(Arg("prompt_state_out", "out_prompt_state", numba_type="nt.float64[:, ::1]"))
    return plan


def breakdown_always(ir) -> bool:
    """Whether a metric reads a term or factor: the kernel then always stores the breakdown."""
    read = {n.attr[1] for _, m in ir.metrics for n in walk(m) if n.op is Op.REF and n.attr[0] == "var"}
    return any(v in read for v in (*ir.terms, *ir.factors))
