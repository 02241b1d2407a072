"""Live metrics: TensorBoard event files written by the host between chunks (``--tensorboard``).

One event file per cell and process, under ``RUN/tensorboard/GROUP/cell-<i>_B<lag>_s<seed>/`` for a
study script, and ``OUT/<name>/tensorboard/<env>/<method>/cell-0_.../`` for ``vaco-train``. After every chunk
each cell gets one scalar per number of its ``curves.csv`` row (returns, losses, clip/filter
fractions, TV estimates, mean staleness, timing) and its realised staleness histogram, at global
step = the cell's env steps; the file is flushed before the next chunk starts, so
``tensorboard --logdir RUN/tensorboard`` shows a sweep while it runs.

The events are built with tensorboardX's protobufs and summary builders (no TensorFlow) and written
synchronously (no writer threads): 1 to 2.5 kB per cell and chunk (4 to 32 ages, 30 scalars). A resumed run opens a
new event file next to the old one and writes from the chunk it resumes at; chunks done after the
last checkpoint of the interrupted run (and every chunk of a group that restarts from its first
chunk) therefore appear twice at the same step. The event files are a view of the run, never read
back: ``curves.csv`` and ``staleness.npz`` are the results.
"""

from __future__ import annotations

import itertools
import os
from typing import Iterable, Sequence

import numpy as np

# curves.csv columns that name a row rather than measure anything (besides the cell's own columns)
ROW_KEYS = ("env", "method", "cell", "chunk", "env_steps")
_RETURNS = ("eval_return", "train_return")
_TIMING = ("seconds", "steps_per_second", "grid_steps_per_second")
_FILE_IDS = itertools.count()


def tag_for(name: str) -> str:
    """The TensorBoard tag of a ``curves.csv`` column: ``returns/``, ``time/`` or ``diagnostics/``."""
    if name in _RETURNS:
        return f"returns/{name}"
    if name in _TIMING:
        return f"time/{name}"
    return f"diagnostics/{name}"


def cell_run_name(index: int, lag_depth: int, seed: int) -> str:
    return f"cell-{index}_B{lag_depth}_s{seed}"


def scalar_values(row: dict, skip: Iterable[str] = ()) -> dict:
    """The tag -> value pairs of one result row: every finite-or-not number except the identifying
    columns (``ROW_KEYS`` and ``skip``); booleans (``diverged``) become 0/1."""
    skip = set(ROW_KEYS) | set(skip) | {"nonfinite"}  # a text column (empty reads back as NaN): no scalar
    out = {}
    for name, value in row.items():
        if name in skip or isinstance(value, str) or not np.isscalar(value):
            continue
        out[tag_for(name)] = float(value)
    return out


class EventFile:
    """One event file (one TensorBoard run): scalars and the staleness histogram, flushed per call.

    Records use the TFRecord framing TensorBoard reads (length, masked CRC-32C of the length, the
    serialised ``Event``, its masked CRC-32C); the events, summaries and checksums come from
    tensorboardX. Each call ends with a flush to the operating system, not an fsync (a few ms each,
    per cell and chunk): the events are a view of the run, and its results are written durably
    elsewhere.
    """

    def __init__(self, logdir: str):
        import socket
        import time

        from tensorboardX.proto.event_pb2 import Event

        os.makedirs(logdir, exist_ok=True)
        # pid and a counter keep two files of one directory apart (a resume within the same second)
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}.{next(_FILE_IDS)}"
        self.path = os.path.join(logdir, name)
        self._file = open(self.path, "wb")
        self._record(Event(wall_time=time.time(), file_version="brain.Event:2"))
        self._file.flush()

    def _record(self, event) -> None:
        import struct

        from tensorboardX.record_writer import masked_crc32c

        data = event.SerializeToString()
        header = struct.pack("<Q", len(data))
        self._file.write(header + struct.pack("<I", masked_crc32c(header)) + data
                         + struct.pack("<I", masked_crc32c(data)))

    def write(self, step: int, scalars: dict, staleness_counts: Sequence[int] | None = None) -> None:
        import time

        from tensorboardX.proto.event_pb2 import Event
        from tensorboardX.proto.summary_pb2 import Summary
        from tensorboardX.summary import histogram_raw

        values = [Summary.Value(tag=tag, simple_value=value) for tag, value in scalars.items()]
        if staleness_counts is not None:
            counts = np.asarray(staleness_counts, np.int64)
            total = int(counts.sum())
            ages = np.arange(len(counts))
            values += [Summary.Value(tag=f"staleness/share_age_{a}", simple_value=float(c) / max(total, 1))
                       for a, c in zip(ages, counts)]
            if total > 0:
                seen = ages[counts > 0]
                hist = histogram_raw("staleness/age", min=float(seen.min()), max=float(seen.max()), num=total,
                                     sum=float(counts @ ages), sum_squares=float(counts @ ages ** 2),
                                     bucket_limits=(ages + 0.5).tolist(), bucket_counts=counts.tolist())
                values += list(hist.value)
        self._record(Event(wall_time=time.time(), step=int(step), summary=Summary(value=values)))
        self._file.flush()

    def close(self) -> None:
        self._file.close()


class GroupWriter:
    """The event files of a group's cells (opened at their first chunk, closed with ``close``)."""

    def __init__(self, logdir: str, run_names: Sequence[str]):
        self.logdir = logdir
        self.run_names = list(run_names)
        self._files: dict[int, EventFile] = {}

    def write(self, index: int, row: dict, staleness_counts=None, skip: Iterable[str] = ()) -> None:
        if index not in self._files:
            self._files[index] = EventFile(os.path.join(self.logdir, self.run_names[index]))
        self._files[index].write(int(row["env_steps"]), scalar_values(row, skip), staleness_counts)

    def close(self) -> None:
        for f in self._files.values():
            f.close()
        self._files.clear()
