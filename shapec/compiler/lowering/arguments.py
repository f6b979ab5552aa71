"""Argument planning: the kernel's struct-of-arrays arguments, the names of its values, and where
each let or gate lives (a scalar, a row per group, a scratch array per rollout or item)."""

from __future__ import annotations

from ..ir import GROUP, PARAM, ROLLOUT, Node, Step
from .emitter import Arg, Emitter, steps_nodes, walk


class Arguments:
    """The part of StageLowering (stage.py) that plans arguments, names and storage."""

    def plan_args(self) -> None:
        ir, new = self.ir, self.namer.new
        a = self.args
        a += [Arg("rewards", "rewards"), Arg("env_rewards", "env_rewards"),
              Arg("offsets", "offsets", numba_type="nt.int64[::1]"), Arg("components", "components"),
              Arg("use_components", "use_components", numba_type="nt.boolean")]
        if self.parallel:  # read in Python: numba.get_num_threads() inside a kernel defeats its cache
            a.append(Arg("nthreads", "nthreads", numba_type="nt.int64"))
        self.input_names = {}
        for name, _ in ir.inputs:
            self.input_names[name] = new("in", name)
            a.append(Arg(self.input_names[name], "input", name))
        metas, bands, lists = [], [], []
        for node in steps_nodes(ir):
            for n in walk(node):
                if n.op == "ref" and n.attr[0] == "meta" and n.attr[1] not in metas:
                    metas.append(n.attr[1])
                elif n.op == "bandref" and n.attr[0] == "meta" and n.attr[1] not in bands:
                    bands.append(n.attr[1])
                elif n.op == "ref" and n.attr[0] == "item":
                    lst = n.attr[1].split(".", 1)[0]
                    if lst not in lists:
                        lists.append(lst)
                elif n.op == "reduce" and n.attr[1] and n.attr[1] not in lists:
                    lists.append(n.attr[1])
        self.meta_names = {p: new("m", p) for p in metas}
        self.band_names = {p: new("bd", p) for p in bands}
        a += [Arg(v, "meta", p) for p, v in self.meta_names.items()]
        a += [Arg(v, "band", p, "nt.float64[:, ::1]") for p, v in self.band_names.items()]
        self.list_offsets: dict[str, str] = {}
        self.list_sizes: dict[str, str] = {}
        self.list_fields: dict[str, str] = {}
        spec = {m.name: m for m in ir.metas}
        for lst in lists:
            self.list_offsets[lst] = new("lo", lst)
            self.list_sizes[lst] = new("ni", lst)
            a.append(Arg(self.list_offsets[lst], "list_offsets", lst, "nt.int64[::1]"))
            for fld, _ in spec[lst].fields:
                self.list_fields[f"{lst}.{fld}"] = new("lf", f"{lst}_{fld}")
                a.append(Arg(self.list_fields[f"{lst}.{fld}"], "list_field", (lst, fld)))
        # params packed: one (P, G) matrix of the scalar ones, one (B, G, 4) array of the bands (two
        # arguments to unbox per call, not one per param; the caller stacks them once per params dict)
        scalars = tuple(ps.name for ps in ir.params if ps.kind != "band")
        bands_p = tuple(ps.name for ps in ir.params if ps.kind == "band")
        self.param_rows = {name: k for k, name in enumerate(scalars)}
        self.param_band_rows = {name: k for k, name in enumerate(bands_p)}
        if scalars:
            a.append(Arg("params", "params", scalars, "nt.float64[:, ::1]"))
        if bands_p:
            a.append(Arg("param_bands", "params", bands_p, "nt.float64[:, :, ::1]"))
        self.state_names = {name: new("st", name) for name, _ in ir.states}
        a.append(Arg("state_in", "state"))
        a.append(Arg("keep", "breakdown", numba_type="nt.boolean"))  # store terms and factors
        # outputs, allocated by numpy (whose large arrays get transparent huge pages) and filled here
        a += [Arg("out", "out"), Arg("terms", "out_terms", numba_type="nt.float64[:, ::1]"),
              Arg("factors", "out_factors", numba_type="nt.float64[:, ::1]"),
              Arg("skip", "out_skip", numba_type="nt.int64[::1]"),
              Arg("gates", "out_gates", numba_type="nt.int64[:, ::1]"), Arg("metrics", "out_metrics")]

    def signature(self) -> str:
        return "(" + ", ".join(a.numba_type for a in self.args) + ",)"

    # ------------------------------------------------------------ naming
    def fresh(self, kind: str) -> str:
        return self.namer.new(kind)

    def var(self, name: str) -> str:
        """The kernel name of a let, gate or channel."""
        if name not in self.var_names:
            self.var_names[name] = self.namer.new("v", name)
        return self.var_names[name]

    def note(self, text: str) -> str:
        """A comment of the generator's own text, registered for verify.py."""
        return self.namer.comment(text)

    def label(self, step: Step) -> str:
        """A statement's comment: its kind and its kernel name or index, never its spec name."""
        if step.kind in ("let", "gate", "gaterules"):
            return f"{step.kind} {self.var(step.name)}"
        if step.kind == "state":
            return f"state {self.state_names[step.name]}"
        if step.kind == "skip":
            return f"skip {self.ir.skip_reasons.index(step.name)}"
        index = {"term": self.ir.terms, "factor": self.ir.factors}.get(step.kind)
        return f"{step.kind} {index.index(step.name)}" if index else step.kind

    def emitter(self, depth: int = 0) -> Emitter:
        out = Emitter(self.pending)
        out.depth = depth
        return out

    def key(self, node: Node) -> int:
        """Node.key() as a small number, computed without recursion: equal structure, equal number."""
        stack = [node]
        while stack:
            n = stack[-1]
            if id(n) in self.keys:
                stack.pop()
                continue
            todo = [a for a in n.args if id(a) not in self.keys]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            ident = (n.op, n.attr, tuple(self.keys[id(a)] for a in n.args))
            self.keys[id(n)] = self.interned.setdefault(ident, len(self.interned))
        return self.keys[id(node)]

    def storage(self, node: Node, name: str) -> str:
        """Where a let/gate value lives: a per-rollout value in group scratch unless a metric reads
        it (then a row of the batch); a per-group value in a local of the group loop, reset to
        missing at each group, unless a metric reads it after the loop (group_storage)."""
        ty = node.ty
        if ty.items:
            return f"item:{ty.items}"
        if ty.level == ROLLOUT:
            return "rollout" if name in self.metric_vars else "local"
        if ty.level in (PARAM, GROUP):
            return self.group_storage(name)
        return "scalar"

    def group_storage(self, name: str) -> str:
        """A per-group value (a let, gate or gate-rule block): a local of the group loop, or an
        array of G when a metric reads it after the loop."""
        return "group" if name in self.metric_vars else "group_local"

    def alloc(self, storage: str, name: str) -> None:
        if storage == "group_local":
            self.group_locals.append(name)
            return
        size = {"rollout": "n", "group": "G", "local": "width"}.get(storage)
        if size is None and storage.startswith("item:"):
            size = self.list_sizes[storage[5:]]
        if size is not None:
            lines = self.chunk_arrays if storage == "local" else self.arrays
            lines.append(f"{name} = np.full({size}, nan)")
