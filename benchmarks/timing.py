"""The benchmarks' timing harness: compiled programs whose chained calls are timed with Python's
garbage collector held off, and listeners that log XLA compilations and long collections, so a
timing that holds either is flagged (docs/benchmarks.md, "How throughput is timed")."""

from __future__ import annotations

import dataclasses
import gc
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np


class GcLog:
    """Records every collection of Python's garbage collector of at least ``min_seconds`` (start, seconds,
    generation) through ``gc.callbacks``."""

    def __init__(self, min_seconds: float = 0.005):
        self.min_seconds, self.pauses, self._start = min_seconds, [], None
        gc.callbacks.append(self._listen)

    def _listen(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.perf_counter()
        elif self._start is not None:
            seconds = time.perf_counter() - self._start
            if seconds >= self.min_seconds:
                self.pauses.append((self._start, seconds, info.get("generation")))
            self._start = None

    def close(self) -> None:
        if self._listen in gc.callbacks:
            gc.callbacks.remove(self._listen)

    def summary(self, programs: list) -> dict:
        """The pauses, and for each program how many began inside one of its timed calls."""
        inside = {p.label: sum(any(t0 <= t < t0 + sec for *_, sec, t0 in p.call_seconds) for t, _, _ in self.pauses)
                  for p in programs}
        return {"min_seconds": self.min_seconds, "pauses": self.pauses, "inside_timed_calls": inside,
                "longest_seconds": max((sec for _, sec, _ in self.pauses), default=0.0)}


class CompileLog:
    """Records every XLA backend compilation (end time, seconds) through ``jax.monitoring``."""

    EVENT = "/jax/core/compile/backend_compile_duration"

    def __init__(self):
        self.events: list[tuple[float, float]] = []
        jax.monitoring.register_event_duration_secs_listener(self._listen)

    def _listen(self, event: str, duration: float, **kwargs) -> None:
        if event == self.EVENT:
            self.events.append((time.perf_counter(), float(duration)))

    def between(self, t0: float, t1: float) -> tuple[int, float]:
        """(count, seconds) of the compilations that ended inside [t0, t1]."""
        hits = [d for t, d in self.events if t0 <= t <= t1]
        return len(hits), float(sum(hits))


@dataclasses.dataclass
class Program:
    """A compiled program whose timed calls are chained: each call's output feeds the next call."""

    label: str
    compiled: Callable
    args: tuple
    next_args: Callable[[Any, tuple], tuple]
    steps_per_call: int
    compile_seconds: float
    xla_compile_seconds: float
    extra: dict = dataclasses.field(default_factory=dict)
    seconds: list = dataclasses.field(default_factory=list)
    seconds_after: list = dataclasses.field(default_factory=list)  # bracketing calls (see ``timed_call``)
    compiles: int = 0
    calls_per_round: int = 1  # calls summed into a round's seconds (``steps_per_call`` counts them all)
    call_seconds: list = dataclasses.field(default_factory=list)  # every timed call, in order: (round, after, seconds, start)
    gc_off: bool = True  # Python's garbage collector disabled inside a call (``Args.gc_during_timing``)

    def call(self) -> float:
        """One call, blocked until ready; returns its wall-clock seconds."""
        was_on = gc.isenabled()
        if self.gc_off:
            gc.disable()
        try:
            t0 = time.perf_counter()
            out = jax.block_until_ready(self.compiled(*self.args))
            t1 = time.perf_counter()
        finally:
            if was_on:
                gc.enable()
        self.args = self.next_args(out, self.args)
        return t1 - t0

    def timed_call(self, log: CompileLog, after: bool = False, more: bool = False) -> float:
        """One timed call of round r; ``after=True``: the second call of round r, made right after the
        Brax epoch that the round's first call preceded (the two bracket that epoch in time).
        ``more=True``: the call adds its seconds to round r's (a round of several short calls)."""
        t0 = time.perf_counter()
        seconds = self.call()
        times = self.seconds_after if after else self.seconds
        self.call_seconds.append((len(times) - (1 if more else 0), after, seconds, t0))
        if more:
            times[-1] += seconds
        else:
            times.append(seconds)
        self.compiles += log.between(t0, time.perf_counter())[0]
        return self.steps_per_call / self.calls_per_round / seconds  # this call's rate

    def summary(self) -> dict:
        per_call = [self.steps_per_call / s for s in self.seconds]
        bracket = {}
        if self.seconds_after:  # round r: its two calls' env steps over their seconds together
            each = [2 * self.steps_per_call / (a + b) for a, b in zip(self.seconds, self.seconds_after)]
            bracket = {"bracket_steps_per_second_each": each, "bracket_steps_per_second": float(np.median(each)),
                       "seconds_after_each": list(self.seconds_after)}
        return {
            "steps_per_second": float(np.median(per_call)),
            "steps_per_second_each": per_call,
            **bracket,
            "seconds_each": list(self.seconds),
            "call_seconds": list(self.call_seconds),
            "env_steps_per_call": self.steps_per_call,
            "compile_seconds": self.compile_seconds,
            "xla_compile_seconds": self.xla_compile_seconds,
            "compiles_during_timing": self.compiles,
            **self.extra,
        }


def prepare(label: str, fn: Callable, args: tuple, next_args: Callable, *, steps_per_call: int,
            warmup: int, log: CompileLog, **extra) -> Program:
    """Compile ``fn`` ahead of time (timed) and run ``warmup`` untimed calls."""
    t0 = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    t1 = time.perf_counter()
    program = Program(label, compiled, args, next_args, steps_per_call, t1 - t0, log.between(t0, t1)[1],
                      extra=dict(extra))
    for _ in range(warmup):
        program.call()
    return program


def raw_env_program(step: Callable, num_envs: int, action_size: int, unroll_length: int, phases: int):
    """``phases`` x a ``lax.scan`` of ``unroll_length`` batched steps with uniform random actions."""

    def run(state, key):
        def one_step(carry, _):
            s, k = carry
            k, k_act = jax.random.split(k)
            action = jax.random.uniform(k_act, (num_envs, action_size), minval=-1.0, maxval=1.0)
            s, reward = step(s, action)
            return (s, k), jnp.sum(reward)

        def one_phase(carry, _):
            carry, rewards = jax.lax.scan(one_step, carry, None, length=unroll_length)
            return carry, jnp.sum(rewards)

        (state, key), rewards = jax.lax.scan(one_phase, (state, key), None, length=phases)
        return state, key, jnp.sum(rewards)  # the reward sum keeps every step observable

    return run
