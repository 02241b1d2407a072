"""A real asynchronous actor–learner on the trainer's own pieces (docs/real_async.md).

The simulator draws each actor's lag from a model; here the lag is whatever the threads produce.

* **Actors** (``num_actors`` threads) each own ``envs_per_actor`` envs (their own env state and key
  stream). An actor fetches the newest published version and its snapshot (policy + normaliser) from
  the parameter store, unrolls its envs ``unroll_length`` steps with it (one jitted rollout; every
  sample records the version), waits ``slowdown - 1`` times the rollout's seconds (an actor
  ``slowdown`` times slower), and puts the batch on a queue of ``queue_capacity`` batches, blocking
  while it is full.
* **The learner** (the calling thread) takes ``batches_per_update`` batches off the queue as they
  arrive, scales each batch's rewards with the running scaler of its envs, and runs the trainer's
  own ``learn`` (align once, then E x M minibatch steps) on their concatenation against its policy
  buffer of the last ``buffer_capacity`` versions; then it updates the observation normaliser and
  makes version ``T + 1``, which it publishes to the actors every ``publish_interval`` updates (its
  own buffer holds every version). A batch older than the buffer holds is dropped and counted.

How deep the realised lag is follows from these knobs (docs/real_async.md, "Deep lag"): with one
batch per update, a batch waits behind up to ``queue_capacity`` others, each one update; a publish
interval of k adds up to k - 1 versions to every batch made between two publications.

``mode='sync'`` runs the same threads in lockstep: each actor waits for a version newer than the one
it last used, and the learner takes one batch of the current version from every actor — the
synchronous actor–learner that asynchrony is measured against.

Every produced batch is accounted for exactly once (consumed, dropped as too old, or left in the
queue at the end) in the record, one row per batch, with its actor, its behaviour version, the
learner's version when consumed and the wall-clock times. Threads make a real run irreproducible
bit for bit (arrival order decides the batches); its age histogram is kept, so the simulator's
counterpart of it is reproducible.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import queue
import threading
import time
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from vaco_jax.core import lag as lag_lib
from vaco_jax.core.config import Config, ConfigError, make_traced
from vaco_jax.core.networks import RewardScalerState, normalizer_update, reward_scaler_init, reward_scaler_update
from vaco_jax.core.rollout import rollout
from vaco_jax.core.train import PHASE_STREAM, evaluation_program, make_train
from vaco_jax.envs import reset_batch

ACTOR_STREAM = 0xAC7  # fold_in stream of the run key for the actors' keys
STALL_FACTOR = 100  # batches dropped in a row, per actor and queue slot, that count as a stall (run_real)
MODES = ("async", "sync")


def _check_count(name: str, value, alternative: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ConfigError(f"{name}={value!r} must be a positive integer{alternative}")


def _is_real(x) -> bool:
    return isinstance(x, (int, float, np.integer, np.floating)) and not isinstance(x, (bool, np.bool_))


@dataclasses.dataclass(frozen=True)
class RealSettings:
    """How the real system is laid out (the training settings are a ``Config``: ``num_envs`` is every
    actor's envs together, ``buffer_capacity`` the learner's buffer). Every field's type and range is
    checked as the settings are made, as ``Config``'s are (a bool is not a count); how they fit a
    ``Config`` is checked by ``check``."""

    num_actors: int = 4
    slowdown: tuple[float, ...] = ()  # per actor, >= 1 (an actor this many times slower); () = all 1
    queue_capacity: int = 4  # batches waiting for the learner; a full queue blocks the actors
    # batches per learner update, >= 1; None (the default): one from every actor, num_actors
    batches_per_update: int | None = None
    mode: str = "async"  # 'async' or 'sync' (lockstep: the synchronous reference)
    publish_interval: int = 1  # the learner publishes a version to the actors every this many updates

    def __post_init__(self):
        for name in ("num_actors", "queue_capacity", "publish_interval"):
            _check_count(name, getattr(self, name))
        if self.batches_per_update is not None:
            _check_count("batches_per_update", self.batches_per_update, " (or None: one from every actor)")
        factors = self.slowdown
        if not isinstance(factors, (tuple, list)) or (factors and len(factors) != self.num_actors) or not all(
                _is_real(s) and np.isfinite(s) and s >= 1 for s in factors):
            raise ConfigError(f"slowdown={factors!r}: one factor >= 1 per actor ({self.num_actors}), or none")
        if not isinstance(self.mode, str) or self.mode not in MODES:
            raise ConfigError(f"mode={self.mode!r}; allowed values: {', '.join(MODES)}")

    def slowdowns(self) -> tuple[float, ...]:
        return tuple(self.slowdown) if self.slowdown else (1.0,) * self.num_actors

    def per_update(self) -> int:
        return self.num_actors if self.batches_per_update is None else self.batches_per_update

    def check(self, config: Config) -> None:
        """How the settings fit ``config`` (their own types and ranges: as they were made)."""
        self.__post_init__()  # again: object.__setattr__ can still change a frozen dataclass's fields
        if config.num_envs % self.num_actors:
            raise ConfigError(f"num_envs={config.num_envs} must be a multiple of num_actors={self.num_actors} "
                              "(each actor steps num_envs / num_actors envs)")
        per = self.per_update()
        if self.publish_interval > config.buffer_capacity:
            # between publications the actors act with one version; once the learner is buffer_capacity
            # versions past it, every batch they send is dropped and no new version can be made: a stall
            raise ConfigError(f"publish_interval={self.publish_interval} must be at most buffer_capacity="
                              f"{config.buffer_capacity} (the actors' version must stay in the learner's buffer)")
        if self.mode == "sync" and self.publish_interval != 1:
            raise ConfigError(f"publish_interval={self.publish_interval}: mode='sync' publishes every update (1)")
        if self.mode == "sync" and per != self.num_actors:
            raise ConfigError(f"batches_per_update={per}: mode='sync' takes one batch from every actor "
                              f"({self.num_actors})")


class ParameterStore:
    """The newest published version and its snapshot; actors read it, the learner writes it."""

    def __init__(self, version: int, snapshot: Any):
        self._cond = threading.Condition()
        self._version, self._snapshot = version, snapshot

    def publish(self, version: int, snapshot: Any) -> None:
        with self._cond:
            self._version, self._snapshot = version, snapshot
            self._cond.notify_all()

    def latest(self) -> tuple[int, Any]:
        with self._cond:
            return self._version, self._snapshot

    def newer_than(self, version: int, stop: threading.Event, poll: float = 0.05) -> tuple[int, Any] | None:
        """Wait for a version above ``version`` (None once ``stop`` is set)."""
        with self._cond:
            while self._version <= version:
                if stop.is_set():
                    return None
                self._cond.wait(poll)
            return self._version, self._snapshot


@dataclasses.dataclass
class Batch:
    actor: int
    index: int  # the actor's rollout number
    version: int  # behaviour version of every sample in it
    traj: Any  # Transition [U, envs_per_actor, ...]
    started: float  # wall-clock seconds since the run's start: the rollout began / the batch was queued
    queued: float


@dataclasses.dataclass
class RealRun:
    record: list[dict]  # one row per produced batch (consumed, dropped or left)
    curve: list[dict]  # evaluation points: update, env_steps, seconds, eval_return
    ages: np.ndarray  # consumed samples by age (learner version - behaviour version)
    seconds: float  # wall clock of the training (no evaluation)
    env_steps: int  # consumed samples
    updates: int
    diagnostics: list[dict]  # the learner's per-update means (a few keys)
    # the machine's 1-minute load average as training started and ended (os.getloadavg): a real run's ages
    # and speed depend on what else shares the cores, so every run says how loaded the machine was
    load: dict = dataclasses.field(default_factory=dict)

    @property
    def env_steps_per_second(self) -> float:
        return self.env_steps / self.seconds if self.seconds > 0 else float("nan")


def _load_average() -> float | None:
    try:
        return float(os.getloadavg()[0])
    except (AttributeError, OSError):  # not every platform has it
        return None


def _learner_config(config: Config) -> Config:
    """The learner reads samples of any age its buffer holds: a lagged (non-synchronous) update path.
    Its nominal lag depth (read only by the revised PPO-EWMA's window and the exact recomputation of
    old log-probs) is the buffer's capacity."""
    return config.replace(lag_model="uniform", lag_depth=config.buffer_capacity, age_weights=None, publish_interval=1)


@dataclasses.dataclass(frozen=True)
class Pieces:
    """The compiled pieces of one learner configuration (``pieces``). The run's key, states and data
    are arguments, so every seed and every ``RealSettings`` that gives the learner the same
    configuration calls the same programs."""

    trainer: Any
    traced: Any
    act: Callable  # (env_state, snapshot, version, key) -> (env_state, traj): one actor's rollout
    scale: Callable  # (scaler, actor, reward, dones) -> (scaler, scaled): an actor's rewards scaled
    learn: Callable  # (run_key, learner, normalizer, buffer, trajs, version) -> (learner, normalizer, buffer, diag)
    evaluate: Callable  # (run_key, version, policy_params, normalizer) -> the chunk's evaluation
    reset: Callable  # key -> one actor's envs reset


# Pieces shared within a process: key (learner_config's repr, the env object, the networks and the
# traced values it resolves to) -> Pieces. Only functions and the trainer they close over are kept, never
# a run's state; the oldest is dropped beyond PIECES_KEPT. Tracing, lowering and compiling them is most of
# a short run's CPU time; each configuration kept holds its compiled executables in memory, and a study's
# real stage cycles through up to 6 learner configurations seed by seed (their cost: BENCHMARKS.md, "Real
# runs share their compiled programs").
_PIECES: "collections.OrderedDict[tuple, Pieces]" = collections.OrderedDict()
PIECES_KEPT = 6


def pieces(learner_cfg: Config) -> Pieces:
    """The jitted pieces of a real run whose learner trains ``learner_cfg`` (``num_envs``: the envs of
    one update, ``envs_per_actor``: one actor's), built once per process for each configuration. The
    key holds what the config's names resolve to (a task, a network or a method registered again under
    the same name is another key); a cached entry keeps its trainer, so the env's id is not reused
    while it is kept."""
    trainer = make_train(learner_cfg)
    traced = make_traced(learner_cfg)
    key = (repr(learner_cfg), id(trainer.env.raw), type(trainer.policy_net), repr(trainer.policy_net),
           type(trainer.value_net), repr(trainer.value_net), jax.tree.structure(traced), repr(traced))
    if key in _PIECES:
        _PIECES.move_to_end(key)
        return _PIECES[key]
    cfg, env, per_actor = learner_cfg, trainer.env, learner_cfg.envs_per_actor

    def act(env_state, snapshot, version, key):
        one = lag_lib.buffer_init(snapshot, 1)  # unread: a synchronous rollout acts with ``snapshot``
        return rollout(env=env, policy_apply=trainer.nets.policy_apply, buffer=one, learner_snapshot=snapshot,
                       env_state=env_state, start_ages=jnp.zeros((1,), jnp.int32), action_key=key,
                       unroll_length=cfg.unroll_length, lag=lag_lib.Synchronous(), envs_per_actor=per_actor,
                       actor_dtype=cfg.actor_dtype, normalize_observations=cfg.normalize_observations,
                       phase=version, mismatch_strength=traced.mismatch_strength)

    def scale(scaler, actor, reward, dones):
        lo = actor * per_actor
        part = RewardScalerState(jax.lax.dynamic_slice(scaler.returns, (lo,), (per_actor,)), scaler.stats)
        part, scaled = reward_scaler_update(part, reward, dones, traced.gamma)
        return RewardScalerState(jax.lax.dynamic_update_slice(scaler.returns, part.returns, (lo,)), part.stats), scaled

    def learn(run_key, learner, normalizer, buffer, trajs, version):
        traj = jax.tree.map(lambda *xs: jnp.concatenate(xs, axis=1), *trajs)
        key = jax.random.split(jax.random.fold_in(jax.random.fold_in(run_key, PHASE_STREAM), version))[1]
        learner, diag = trainer.learn(learner, normalizer, buffer, traj, version, key, traced)
        if cfg.normalize_observations:  # after the update, as in the simulator (docs/lag.md)
            normalizer = normalizer_update(normalizer, traj.obs)
        buffer = lag_lib.buffer_publish(buffer, trainer.snapshot(learner.policy_params, normalizer), version + 1)
        return learner, normalizer, buffer, diag

    made = Pieces(trainer, traced, jax.jit(act), jax.jit(scale), jax.jit(learn), evaluation_program(trainer),
                  jax.jit(lambda key: reset_batch(env, key, per_actor)))
    _PIECES[key] = made
    while len(_PIECES) > PIECES_KEPT:
        _PIECES.popitem(last=False)
    return made


def run_real(config: Config, settings: RealSettings, seed: int = 0, log=None) -> RealRun:
    """Train ``config`` with real actor threads; see the module's docstring. ``config.total_env_steps``
    consumed samples, in ``config.num_evals`` chunks of whole updates evaluated at their ends: the
    simulator's phases exactly (``Config.phases_run``: the remainder of ``total_env_steps`` that does
    not fill a chunk is not trained), so a real run and its simulated counterpart are scored at the
    same env steps. ``seed`` is checked as ``vaco_jax.run`` checks it (an integer in [0, 2^32))."""
    from vaco_jax.driver.grid import check_seed

    check_seed(seed)
    settings.check(config)
    cfg = _learner_config(config)
    per_actor = cfg.num_envs // settings.num_actors
    per_update = settings.per_update()
    learner_cfg = cfg.replace(num_envs=per_actor * per_update, envs_per_actor=per_actor)
    compiled = pieces(learner_cfg)
    trainer, traced = compiled.trainer, compiled.traced
    eval_every, updates = learner_cfg.phases_per_chunk, learner_cfg.phases_run  # the simulator's phases
    run_key = jax.random.PRNGKey(seed)
    state = trainer.init(run_key, traced)
    capacity = cfg.buffer_capacity
    act_jit, scale_jit, learn_jit, evaluate_jit = compiled.act, compiled.scale, compiled.learn, compiled.evaluate

    # ------------------------------------------------------------------ threads
    store = ParameterStore(0, trainer.snapshot(state.learner.policy_params, state.normalizer))
    batches: queue.Queue = queue.Queue(maxsize=settings.queue_capacity)
    stop = threading.Event()
    errors: list[BaseException] = []
    produced: list[Batch] = []
    produced_lock = threading.Lock()
    actor_keys = [jax.random.fold_in(jax.random.fold_in(run_key, ACTOR_STREAM), a) for a in range(settings.num_actors)]

    # every actor's envs reset, and everything compiled, before the clock starts
    reset_jit = compiled.reset
    env_states = [jax.block_until_ready(reset_jit(jax.random.fold_in(k, 0))) for k in actor_keys]
    _, warm = act_jit(env_states[0], store.latest()[1], 0, actor_keys[0])
    jax.block_until_ready(scale_jit(reward_scaler_init(cfg.num_envs), 0, warm.reward, warm.termination))
    jax.block_until_ready(learn_jit(run_key, state.learner, state.normalizer, state.buffer, (warm,) * per_update, 0))

    def actor_loop(a: int) -> None:
        try:
            key, env_state = actor_keys[a], env_states[a]
            used, index = -1, 0
            while not stop.is_set():
                if settings.mode == "sync":
                    got = store.newer_than(used, stop)
                    if got is None:
                        return
                    version, snapshot = got
                else:
                    version, snapshot = store.latest()
                start = time.perf_counter()
                env_state, traj = act_jit(env_state, snapshot, version, jax.random.fold_in(jax.random.fold_in(key, 1), index))
                jax.block_until_ready(traj.reward)
                took = time.perf_counter() - start
                if settings.slowdowns()[a] > 1:
                    stop.wait(took * (settings.slowdowns()[a] - 1))
                batch = Batch(a, index, int(version), traj, start - t0, time.perf_counter() - t0)
                while not stop.is_set():
                    try:
                        batches.put(batch, timeout=0.05)
                        with produced_lock:
                            produced.append(batch)
                        break
                    except queue.Full:
                        continue
                used, index = version, index + 1
        except BaseException as e:  # reported by the learner, which stops the run
            errors.append(e)
            stop.set()

    threads = [threading.Thread(target=actor_loop, args=(a,), name=f"actor-{a}", daemon=True)
               for a in range(settings.num_actors)]
    record: dict[tuple[int, int], dict] = {}
    ages = np.zeros((capacity,), np.int64)
    snapshots_for_eval: list[tuple[int, int, float, Any, Any]] = []
    diagnostics: list[dict] = []
    learner, normalizer, buffer, scaler = state.learner, state.normalizer, state.buffer, reward_scaler_init(cfg.num_envs)
    version, consumed_steps = 0, 0
    # RealSettings.check rules out a stall; this bound turns any other into an error, not an endless loop.
    # A healthy run drops at most num_actors + queue_capacity batches in a row (those queued or in the
    # making before the learner's last publication), and the count starts again at every batch taken.
    dropped_in_a_row, stall_limit = 0, STALL_FACTOR * (settings.num_actors + settings.queue_capacity)
    load = {"start": _load_average()}
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    try:
        while version < updates:
            taken: list[Batch] = []
            while len(taken) < per_update:
                if errors:
                    raise errors[0]
                try:
                    b = batches.get(timeout=0.05)
                except queue.Empty:
                    continue
                age = version - b.version
                row = {"actor": b.actor, "rollout": b.index, "behaviour_version": b.version, "started_s": b.started,
                       "queued_s": b.queued, "learner_version": version, "age": age,
                       "taken_s": time.perf_counter() - t0, "samples": per_actor * cfg.unroll_length}
                if age < 0:
                    raise RuntimeError(f"actor {b.actor} sent version {b.version} while the learner is at {version}")
                if age >= capacity:
                    record[(b.actor, b.index)] = {**row, "fate": "dropped: older than the buffer"}
                    dropped_in_a_row += 1
                    if dropped_in_a_row > stall_limit:
                        raise RuntimeError(f"the learner dropped {dropped_in_a_row} batches in a row at version "
                                           f"{version} (every one older than its buffer of {capacity}): the actors "
                                           "cannot catch up")
                    continue
                dropped_in_a_row = 0
                if settings.mode == "sync" and (age != 0 or any(x.actor == b.actor for x in taken)):
                    raise RuntimeError(f"sync mode: actor {b.actor} sent version {b.version} at learner version "
                                       f"{version}")
                record[(b.actor, b.index)] = {**row, "fate": "consumed"}
                taken.append(b)
            trajs = []
            for b in taken:
                dones = jnp.maximum(b.traj.termination, b.traj.truncation)
                traj = b.traj
                if cfg.normalize_rewards:
                    scaler, scaled = scale_jit(scaler, b.actor, b.traj.reward, dones)
                    traj = traj._replace(reward=scaled)
                trajs.append(traj)
                ages[version - b.version] += per_actor * cfg.unroll_length
            learner, normalizer, buffer, diag = learn_jit(run_key, learner, normalizer, buffer, tuple(trajs), version)
            version += 1
            if version % settings.publish_interval == 0:
                store.publish(version, trainer.snapshot(learner.policy_params, normalizer))
            consumed_steps += len(taken) * per_actor * cfg.unroll_length
            diagnostics.append({k: float(np.mean(v)) for k, v in diag.items() if k in
                                ("mean_staleness", "tv_behaviour", "tv_learner", "clip_fraction", "policy_loss")})
            if version % eval_every == 0:
                snapshots_for_eval.append((version, consumed_steps, time.perf_counter() - t0,
                                           learner.policy_params, normalizer))
            if log is not None:
                log(version, updates, consumed_steps)
        jax.block_until_ready(learner.policy_params)
        seconds = time.perf_counter() - t0
        load["end"] = _load_average()
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    with produced_lock:
        for b in produced:
            record.setdefault((b.actor, b.index), {
                "actor": b.actor, "rollout": b.index, "behaviour_version": b.version, "started_s": b.started,
                "queued_s": b.queued, "learner_version": None, "age": None, "taken_s": None,
                "samples": per_actor * cfg.unroll_length, "fate": "left in the queue"})
    curve = []
    for v, steps, secs, params, norm in snapshots_for_eval:
        ret = float(evaluate_jit(run_key, jnp.asarray(v, jnp.int32), params, norm))
        curve.append({"update": v, "env_steps": steps, "seconds": secs, "eval_return": ret})
    rows = sorted(record.values(), key=lambda r: (r["queued_s"], r["actor"]))
    return RealRun(rows, curve, ages, seconds, consumed_steps, version, diagnostics, load)


def write_real_run(run_dir: str, run: RealRun, config: Config, settings: RealSettings, seed: int) -> dict:
    """A real run's directory: ``record.csv`` (a row per batch), ``curve.csv`` (the evaluations),
    ``age_histogram.csv`` (consumed samples by age: ``--age-histogram`` reads it) and ``score.json``
    (written last: its presence marks the run finished). Every file is written atomically, every one with
    its checksum (the tables and the histogram beside them in ``NAME.csv.sha256``, the JSON inside it)."""
    from vaco_jax.analysis import results
    from vaco_jax.driver.histogram import write_age_histogram
    from vaco_jax.driver.provenance import machine

    os.makedirs(run_dir, exist_ok=True)
    results.write_table(os.path.join(run_dir, "record.csv"), run.record)
    results.write_table(os.path.join(run_dir, "curve.csv"), run.curve)
    last = int(np.max(np.nonzero(run.ages)[0])) + 1 if run.ages.any() else 1
    write_age_histogram(os.path.join(run_dir, "age_histogram.csv"), run.ages[:last],
                        comment=f"real actor-learner: {config.env}, {config.method}, {settings.num_actors} actors, "
                                f"slowdown {list(settings.slowdowns())}, queue {settings.queue_capacity}, "
                                f"{settings.per_update()} batch(es) per update, publish every "
                                f"{settings.publish_interval}, mode {settings.mode}, seed {seed}", checksum=True)
    evals = np.array([c["eval_return"] for c in run.curve], float)
    fates = [r["fate"] for r in run.record]
    score = {"final_eval_return": float(evals[-1]), "auc_eval_return": float(np.mean(evals)),
             "env_steps": run.env_steps, "seconds": run.seconds, "env_steps_per_second": run.env_steps_per_second,
             "updates": run.updates, "mean_age": float(np.dot(np.arange(len(run.ages)), run.ages) / run.ages.sum()),
             "batches": {f: fates.count(f) for f in sorted(set(fates))}, "load_average": run.load,
             "diverged": bool(not np.all(np.isfinite(evals))),
             "settings": dataclasses.asdict(settings), "seed": seed, "machine": machine(),
             "config": {k: v for k, v in dataclasses.asdict(config).items()}}
    results.write_json(os.path.join(run_dir, "score.json"), score)
    return score
