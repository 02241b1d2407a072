"""How the benchmarks pair their rounds: the call of ours before a Brax epoch and the one after it
bracket that epoch, and the targets are decided round by round (BENCHMARKS.md)."""

import pytest

from benchmarks import brax_ppo, throughput
from benchmarks.throughput import Args, targets
from benchmarks.timing import CompileLog, Program


def test_the_hooks_run_right_before_and_right_after_each_timed_epoch(monkeypatch):
    """A stand-in for Brax's trainer that only calls ``progress_fn`` after each epoch: round r's
    ``between_epochs`` runs right before timed epoch r and ``after_epoch`` right after it."""
    from brax.training.agents.ppo import train as ppo_train

    events = []

    def fake_train(*, progress_fn, num_timesteps, num_evals, **_):
        per_epoch = num_timesteps // (num_evals - 1)
        for epoch in range(num_evals - 1):
            events.append(("epoch", epoch))
            progress_fn((epoch + 1) * per_epoch, {})

    monkeypatch.setattr(ppo_train, "train", fake_train)
    args = Args(num_envs=8, unroll_length=4, num_minibatches=2, phases=2, repeats=3, warmup=2, brax_epochs_per_round=1)
    out = brax_ppo.bench_brax(args, CompileLog(), lambda r: events.append(("before", r)),
                                lambda r: events.append(("after", r)))
    # epochs 0 and 1 are untimed (warm-up 2); timed epoch r is epoch r + 2
    assert events == [("epoch", 0), ("epoch", 1), ("before", 0), ("epoch", 2), ("after", 0), ("before", 1),
                      ("epoch", 3), ("after", 1), ("before", 2), ("epoch", 4), ("after", 2)]
    assert len(out["steps_per_second_each"]) == 3


def test_rounds_of_several_brax_epochs(monkeypatch):
    """With k epochs a round, ours runs before and after every epoch, the round's other measurements
    only before its first; Brax's round rate is its k epochs' env steps over their seconds together,
    and ours' round sums its k calls before and its k calls after."""
    from brax.training.agents.ppo import train as ppo_train

    events, clock = [], [0.0]
    epoch_seconds = [9.0, 1.0, 2.0, 3.0, 4.0, 6.0]  # the untimed epoch, then two rounds of two

    def fake_train(*, progress_fn, num_timesteps, num_evals, **_):
        per_epoch = num_timesteps // (num_evals - 1)
        for epoch in range(num_evals - 1):
            clock[0] += epoch_seconds[epoch]
            events.append(("epoch", epoch))
            progress_fn((epoch + 1) * per_epoch, {})

    monkeypatch.setattr(ppo_train, "train", fake_train)
    monkeypatch.setattr(brax_ppo.time, "perf_counter", lambda: clock[0])
    ours = Program("ours", None, (), None, steps_per_call=100, compile_seconds=0.0, xla_compile_seconds=0.0)
    ours.call = lambda: events.append("ours") or 0.5
    ours.steps_per_call *= 2
    ours.calls_per_round = 2

    def run_round(r):
        events.append(("round", r))
        ours.timed_call(CompileLog())

    args = Args(num_envs=8, unroll_length=4, num_minibatches=2, phases=2, repeats=2, warmup=1, brax_epochs_per_round=2)
    out = brax_ppo.bench_brax(args, CompileLog(),
                                *throughput.epoch_hooks(2, 2, run_round, ours, CompileLog()))
    assert events == [("epoch", 0), ("round", 0), "ours", ("epoch", 1), "ours", "ours", ("epoch", 2), "ours",
                      ("round", 1), "ours", ("epoch", 3), "ours", "ours", ("epoch", 4), "ours"]
    steps = 2 * 8 * 4  # phases x num_envs x unroll_length per epoch
    import gc
    assert gc.isenabled()  # off during Brax's timed epochs only, on again after its run
    assert out["steps_per_second_each"] == pytest.approx([2 * steps / 3.0, 2 * steps / 7.0])
    assert out["steps_per_second_each_epoch"] == pytest.approx([steps / 1.0, steps / 2.0, steps / 3.0, steps / 4.0])
    assert ours.seconds == [1.0, 1.0] and ours.seconds_after == [1.0, 1.0]  # two calls of 0.5 s each
    assert ours.summary()["bracket_steps_per_second_each"] == [200.0, 200.0]  # 4 calls of 100 steps in 2 s


def test_the_round_counts_must_be_positive():
    with pytest.raises(SystemExit, match=r"--brax-epochs-per-round \(got 0\) and --repeats \(got 3\) must be >= 1"):
        throughput.main(Args(brax_epochs_per_round=0))


def test_the_bracketing_rate_and_the_round_by_round_targets():
    ours = Program("ours", None, (), None, steps_per_call=100, compile_seconds=0.0, xla_compile_seconds=0.0,
                   seconds=[1.0, 2.0, 1.0], seconds_after=[3.0, 2.0, 1.0])
    summary = ours.summary()
    assert summary["steps_per_second_each"] == [100.0, 50.0, 100.0]  # the calls before the epochs
    assert summary["bracket_steps_per_second_each"] == [50.0, 50.0, 100.0]  # both calls of a round together
    results = {"ours": summary, "brax": {"steps_per_second_each": [40.0, 50.0, 90.0]},
               "ours_sync": {"steps_per_second_each": [100.0, 100.0, 100.0]},
               "ours_b32": {"steps_per_second_each": [95.0, 91.0, 100.0]}}
    found = {(t["decides"], t["bound"]): t for t in targets(Args(compare_lag_depths=(32,)), results)}
    brax = found[(True, ">= 1.05")]
    assert brax["each"] == pytest.approx([1.25, 1.0, 100 / 90]) and not brax["met"]  # round 2 is under 1.05
    assert found[(False, ">= 1.05")]["each"] == pytest.approx([2.5, 1.0, 100 / 90])  # the call before alone
    cost = found[(True, "<= 1.10")]
    assert cost["each"] == pytest.approx([100 / 95, 100 / 91, 1.0]) and cost["met"]
    assert (False, "") not in found  # no A/A control without its results
    results[throughput.CONTROL] = {"steps_per_second_each": [80.0, 100.0, 125.0]}
    control = {(t["decides"], t["bound"]): t for t in targets(Args(compare_lag_depths=(32,)), results)}[(False, "")]
    assert control["each"] == pytest.approx([1.25, 1.0, 0.8]) and "A/A control" in control["name"]
    # without bracketing calls (a run without Brax) the target has nothing to decide on
    plain = Program("ours", None, (), None, steps_per_call=100, compile_seconds=0.0, xla_compile_seconds=0.0,
                    seconds=[1.0])
    assert "bracket_steps_per_second_each" not in plain.summary()


def test_the_cost_pair_runs_a_b_b_a_cycles_from_the_same_env_states_and_sums_a_round():
    """(b'') and (b') are timed in A B B A cycles of short calls; every half-cycle starts both from the
    synchronous run's env states; a round's seconds are its cycles' calls summed, per side."""
    from typing import NamedTuple

    class State(NamedTuple):
        env_state: object
        own: int

    calls = []

    def program(label, advance):
        def compiled(state, traced):
            calls.append((label, state.env_state))
            return (State(env_state=state.env_state + advance, own=state.own + 1),)
        return Program(label, compiled, (State(0, 0), None), lambda out, prev: (out[0], prev[1]),
                       steps_per_call=10, compile_seconds=0.0, xla_compile_seconds=0.0)

    sync, lagged = program("ours_sync", 1), program("ours_b32", 100)
    rates = throughput.cost_pair_round([sync, lagged], 2, CompileLog())
    # A B | B A, then rotated: B A | A B; each half-cycle starts from the env state the synchronous run has reached
    assert [c[0] for c in calls] == ["ours_sync", "ours_b32", "ours_b32", "ours_sync",
                                     "ours_b32", "ours_sync", "ours_sync", "ours_b32"]
    assert [c[1] for c in calls] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert lagged.args[0].own == 4  # the rest of its state is its own
    assert len(sync.seconds) == len(sync.seconds_after) == 1 == len(lagged.seconds)  # one round
    assert set(rates) == {"ours_sync", "ours_b32"} and all(r > 0 for r in rates.values())
    calls.clear()
    throughput.cost_pair_round([sync, lagged], 1, CompileLog(), same_states=False)
    assert [c[1] for c in calls] == [4, 103, 203, 5]  # each continues from its own states (b32: 3 + 100)
    assert len(sync.seconds) == 2  # a second round
    assert throughput.cost_pair_round([], 3, CompileLog()) == {}  # --no-synchronous, no depths


def test_the_cost_pair_needs_a_call_and_a_cycle():
    with pytest.raises(SystemExit, match=r"--cost-phases-per-call \(got 0\) and --cost-cycles \(got 20\) must be >= 1"):
        throughput.main(Args(cost_phases_per_call=0))
    with pytest.raises(SystemExit, match=r"--cost-cycles \(got 0\) must be >= 1"):
        throughput.main(Args(cost_cycles=0))


def test_the_garbage_collector_is_off_inside_a_timed_call_and_its_pauses_are_logged():
    """A timed call runs with Python's GC disabled (``gc_during_timing`` off) and restores it after;
    ``GcLog`` records collections and counts those that began inside a program's timed calls."""
    import gc

    seen = []

    def compiled():
        seen.append(gc.isenabled())
        gc.collect()  # a collection inside the call (explicit: automatic ones are off)
        return (0,)

    log = throughput.GcLog(min_seconds=0.0)
    try:
        p = Program("p", compiled, (), lambda out, prev: prev, steps_per_call=1, compile_seconds=0.0,
                    xla_compile_seconds=0.0)
        assert gc.isenabled()
        p.timed_call(CompileLog())
        p.gc_off = False
        p.timed_call(CompileLog(), more=True)
        assert seen == [False, True] and gc.isenabled()
        summary = log.summary([p])
        assert summary["inside_timed_calls"] == {"p": 2} and len(summary["pauses"]) >= 2
        assert [c[:2] for c in p.call_seconds] == [(0, False), (0, False)]
    finally:
        log.close()
    assert log._listen not in gc.callbacks


def test_mujoco_versions_alternates_the_order_and_takes_the_median_ratio(monkeypatch, tmp_path):
    """Each round runs both versions once per task, the first round installed-first and the next the
    other way round; the ratio is other / installed per round, then the median."""
    from benchmarks import mujoco_versions

    (tmp_path / "mujoco").mkdir()
    calls, rates = [], {None: iter([100.0, 100.0, 100.0]), str(tmp_path): iter([110.0, 90.0, 130.0])}

    def fake_child(task, steps, path):
        calls.append("other" if path else "installed")
        return {"mujoco": "X" if path else "Y", "task": task, "rate": next(rates[path]), "resets": 0}

    monkeypatch.setattr(mujoco_versions, "_run_child", fake_child)
    out = mujoco_versions.main(mujoco_versions.Args(other=str(tmp_path), tasks=("Hopper-v4",), rounds=3))
    assert calls == ["installed", "other", "other", "installed", "installed", "other"]
    assert out["ratios"]["Hopper-v4"] == pytest.approx(1.1)
    assert out["versions"] == {"installed": "Y", "other": "X"}


def test_mujoco_versions_refuses_a_directory_without_mujoco(tmp_path):
    from benchmarks import mujoco_versions

    with pytest.raises(SystemExit, match="other=.* must be a directory holding a mujoco package"):
        mujoco_versions.main(mujoco_versions.Args(other=str(tmp_path)))
    (tmp_path / "mujoco").mkdir()
    with pytest.raises(SystemExit, match="tasks: 'Nope-v0' is not one of"):
        mujoco_versions.main(mujoco_versions.Args(other=str(tmp_path), tasks=("Nope-v0",)))


def test_mujoco_versions_times_one_task_in_process():
    """The child's work: a seeded trajectory of the task with resets by its health rule."""
    from benchmarks import mujoco_versions

    out = mujoco_versions.time_task("Hopper-v4", 300)
    assert out["rate"] > 0 and out["resets"] > 0 and out["task"] == "Hopper-v4"
