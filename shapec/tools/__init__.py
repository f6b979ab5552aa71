"""The CLI's working parts: reading rollouts, configs, explain tables, plots and the formatter.

Each module imports its heavy dependencies (pyarrow, rich, matplotlib) lazily, so
`shapec check` and `shapec fmt` start fast and never need them.
"""
