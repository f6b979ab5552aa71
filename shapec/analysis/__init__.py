"""Property analysis of shapers: the invariants `ensure` clauses promise, proved or refuted.

`clause` checks the clauses (called from the checker), `static` is the cheap pass plain `shapec check`
runs, `prove` decides every property with `symbolic` (z3, an optional extra) and `search` (the
reference interpreter), and `report` renders verdicts and writes counterexamples `shapec explain` replays.
"""
