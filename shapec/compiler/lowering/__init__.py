"""Typed IR -> one readable Python module of numba @njit group kernels per shaper or pipeline.

The generated kernel mirrors runtime/interp.py statement by statement, but per group: batch
statements run first, then one loop over groups evaluates skips, lets, gates, terms, clamps and
factors with reductions over scratch buffers, and metrics run last. Every three-valued rule is a
small helper emitted into the module itself, so the module (and numba's on-disk cache of it)
depends on nothing else in shapec. The passes, one file each, are listed in docs/lowering.md.
"""
