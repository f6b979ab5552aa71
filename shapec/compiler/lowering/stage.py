"""StageLowering: one shaper (a pipeline stage) lowered to one kernel, assembled from one mixin
per pass (arguments, expressions, conditions, hoisting, sinking, guards, statements, groups),
which share its state, and asking one Definedness analysis of the IR it lowers."""

from __future__ import annotations

from ...ir.nodes import ShaperIR
from .arguments import Arguments
from .conditions import Conditions
from .definedness import Definedness
from ..arguments import Arg
from .expressions import Expressions
from .groups import Groups
from .guards import Guards
from .names import Namer
from .reductions import Hoisting
from .sinking import Sinking
from .statements import Statements


class StageLowering(Arguments, Expressions, Conditions, Hoisting, Sinking, Guards, Statements, Groups):
    """Lowers one shaper to one kernel function named `kernel_<prefix>`."""

    def __init__(self, ir: ShaperIR, fname: str, namer: Namer, parallel: bool = False, specialized: ShaperIR = None):
        self.ir = ir
        self.fname = fname
        self.namer = namer
        self.parallel = parallel
        self.pending: dict[str, str] = {}  # temporaries not yet written (Emitter)
        self.out = self.emitter()
        self.var_names: dict[str, str] = {}
        self.keys: dict[int, int] = {}  # id(node) -> its structural identity as a small number
        self.interned: dict[tuple, int] = {}
        self.vars: dict[str, str] = {}  # var name -> storage: rollout, group, scalar, item:<list>, term:<k>, factor:<k>
        self.args: list[Arg] = []
        self.arrays: list[str] = []  # allocation lines for per-variable arrays of the whole batch
        self.chunk_arrays: list[str] = []  # ... and for group-sized scratch, one per chunk of groups
        self.group_locals: list[str] = []  # per-group lets and gates held in locals of the group loop
        self.param_locals: dict[str, str] = {}  # param -> the local holding its value in a group
        self.plan_args()
        # the arguments are the general kernel's, so that every specialisation of it takes the same
        # call (specialize.py); the statements are lowered from the specialised IR
        if specialized is not None:
            self.ir = specialized
        self.definedness = Definedness(self.ir)
