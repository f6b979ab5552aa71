"""`shapec run --engine ray`: the local engine's reading, validation, chunks, writers and summary,
with the chunks shaped on Ray workers.

The local engine shapes one chunk (whole prompt groups, up to --chunk-rows rows) at a time, and
batch-level values (`batch.mean(...)`, metrics) are computed per chunk. To write exactly what the local
engine writes, row for row, the Ray engine shapes the same chunks: the driver reads and cuts them with
the local readers (so every data error is the same), Ray Data groups them by chunk number
(`groupby("chunk").map_groups`, so a prompt group is never split across workers) and a callable class
that unpickles the compiled shaper once per worker shapes each with the local `shape_chunk`; the driver
writes the outcomes back in chunk order. A stateful spec (`state`) carries its state from one chunk to
the next, which chunks shaped side by side cannot do: it is refused.
"""

from __future__ import annotations

import contextlib
import pickle
import warnings
from itertools import islice
from typing import Iterator

from .spec import ToolError

WINDOW = 32  # chunks per Ray Data job: bounds the driver's memory to that many chunks


class StatefulSpecError(ToolError):
    """--engine ray with a spec whose state moves from chunk to chunk."""


class _ShapeChunks:
    """The map_groups callable class: one per worker, holding the unpickled shaper. Each run makes a
    subclass carrying its pickled shaper (`payload`), so the class itself brings it to the workers:
    constructor arguments would sit in the object store, which Ray warns about on every run for an
    actor it may restart."""

    payload: bytes = b""

    def __init__(self):
        from . import rundata

        self.shape_chunk = rundata.shape_chunk
        self.shaper, self.plan, self.layout, self.on_bad_row, self.breakdown = pickle.loads(self.payload)

    def __call__(self, batch):
        import numpy as np

        outcomes = []
        for blob in batch["payload"]:
            chunk = pickle.loads(blob)
            try:
                outcome = (self.shape_chunk(self.shaper, self.plan, self.layout, chunk, self.on_bad_row,
                                            breakdown=self.breakdown), None)
            except Exception as err:  # re-raised by the driver, in chunk order, as the local engine would
                outcome = (None, err)
            outcomes.append(pickle.dumps(outcome))
        return {"chunk": batch["chunk"], "outcome": np.array(outcomes, dtype=object)}


def check_stateless(shaper) -> None:
    state = shaper.state_dict()
    if state:
        names = ", ".join(f"{stage}.{k}" for stage, values in state.items() for k in values)
        raise StatefulSpecError(f"--engine ray: {shaper.name} keeps state from one chunk to the next ({names}); "
                                f"chunks shaped in parallel cannot carry it: use --engine local")


def shape_chunks(shaper, plan, layout, chunks: Iterator, on_bad_row: str, breakdown: bool = True) -> Iterator:
    """(chunk, outcome) in input order, as rundata.run_file's local loop makes them."""
    try:
        import ray
    except ImportError:
        raise ToolError("--engine ray needs Ray: pip install 'shapec[ray]'") from None
    check_stateless(shaper)
    quiet_ray()
    if not ray.is_initialized():
        with _without_ray_notices():
            ray.init(log_to_driver=False, configure_logging=False)  # RAY_ADDRESS, if set, names the cluster
    payload = pickle.dumps((shaper, plan, layout, on_bad_row, breakdown))
    while True:
        window, failure = [], None
        try:
            window.extend(islice(chunks, WINDOW))
        except Exception as err:  # a read error after these chunks: theirs come first
            failure = err
        if window:
            yield from _shape_window(ray, window, payload)
        if failure is not None:
            raise failure
        if len(window) < WINDOW:
            return


def quiet_ray() -> None:
    """Ray's own lines on stderr at warning level and above, as shapec's are: its INFO lines (every
    Ray Data execution plan and progress report) would bury the run's summary. Only Ray's loggers
    and Ray Data's progress bars (off for the `shapec run` process) change; the user's logging
    configuration is left as it is. (Ray's notice that token authentication is enabled comes from
    its core, not a logger, and stays.)"""
    import logging

    with _without_ray_notices():
        import ray.data  # configures its logger on import: set the level after it

    for name in ("ray", "ray.data"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # a progress bar (or, without tqdm, a line asking for it on stdout) would mix with the summary
    ray.data.DataContext.get_current().enable_progress_bars = False
    # what Ray Data warns of on every run about settings shapec chose: that progress bars are off
    # (2.60), and, on a machine with a small /dev/shm, that the object store of the cluster shapec
    # starts for itself is smaller than Ray Data's advice (2.51); only their errors are shown
    for name in ("ray.data._internal.progress", "ray.data._internal.execution.resource_manager"):
        logging.getLogger(name).setLevel(logging.ERROR)


@contextlib.contextmanager
def _without_ray_notices():
    """Ray's notes on its own deprecated settings and its tips on future defaults (which GPU
    variables a worker sees), none of which shapec's run sets or depends on, are not shown."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"ray\.")
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"ray\.")
        yield


def _shape_window(ray, window: list, payload: bytes) -> Iterator:
    items = [{"chunk": i, "payload": pickle.dumps(chunk)} for i, chunk in enumerate(window)]
    workers = max(1, min(len(window), int(ray.available_resources().get("CPU", 1))))
    shaper_class = type("ShapeChunks", (_ShapeChunks,), {"payload": payload})
    with _without_ray_notices():
        shaped = (ray.data.from_items(items)
                  .groupby("chunk")
                  .map_groups(shaper_class, batch_format="numpy",
                              compute=ray.data.ActorPoolStrategy(min_size=1, max_size=workers),
                              # a worker that dies fails the run (its files stay as they were) instead
                              # of an actor restart that Ray warns, on every run, could fail anyway
                              max_restarts=0))
        outcomes = {int(row["chunk"]): pickle.loads(row["outcome"]) for row in shaped.take_all()}
    for i, chunk in enumerate(window):
        outcome, err = outcomes[i]
        if err is not None:
            raise err
        yield chunk, outcome
