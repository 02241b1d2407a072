"""MuJoCo's own C engine inside the jitted program: one ``jax.pure_callback`` per vectorised step.

The env state holds the full physics state that ``mj_getState(mjSTATE_INTEGRATION)`` returns (time,
qpos, qvel, act, the solver's warmstart, controls, applied forces, ...), float64, carried through the
program as its bits (``uint32``, two words a number) so that JAX never needs x64. A step hands every
env of the call to the host, which writes the actions into the state rows and steps them:

* through MuJoCo's own threaded batch (``mujoco.batch.Batch``: each row loaded into an ``MjData`` of a
  C++ thread, ``mj_step`` ``frame_skip`` times, the row saved back, the derived fields the task reads
  copied out), or
* for a task whose observation needs ``mj_rnePostConstraint`` after the step, as Gymnasium calls it
  (Humanoid's contact forces), on a thread pool of our own over ``MjData``.

The task's definition (``gymnasium_tasks``) then computes observation, reward and termination for the
whole batch in numpy, float64, exactly as Gymnasium does. Threads = cores unless ``set_threads``.

Why not ``mujoco.rollout``: equality with Gymnasium needs the solver's warmstart to continue from step
to step, and rollout takes one in but does not hand it back (docs/envs.md, "MuJoCo's C engine").

Purity and concurrency. The callback is a pure function of its inputs: the same state and action give
the same bits, whatever the batch, the thread count or the caller; an episode's reset noise comes from
the env's key and episode number (SplitMix64 on the host). Every call checks a batch (or a set of
``MjData`` and its thread pool) out of a pool and returns it after: two concurrent callers (one per
device of a sharded grid, one per actor thread) never share one, and nothing is tied to the life of a
thread the program does not own (XLA's callback threads come and go).

Under ``vmap`` (envs, then a grid's cells) the callback receives all envs of the whole grid at once
(``vmap_method='broadcast_all'``) and steps them in one call.

Unstable physics: when MuJoCo flags a step (bad qacc, qpos or qvel: it then resets that env's data
to the model's defaults by itself), the env's episode ends as a termination and its state counts the
event (``CState.unstable_steps``), so a run can report it instead of continuing from a silently reset
body.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from vaco_jax.envs.gymnasium_tasks import GYM_TASKS, LocomotionTask, load_model, model_constants

_THREADS: int | None = None  # None: one per core
try:
    from mujoco import batch as _mj_batch  # noqa: F401  (mujoco >= 3.17)

    _HAS_BATCH = True
except ImportError:
    _HAS_BATCH = False


def set_threads(n: int | None) -> None:
    """Threads each call steps its envs with (None: one per core). Results do not depend on it."""
    global _THREADS
    if n is not None and (not isinstance(n, int) or n < 1):
        raise ValueError(f"threads={n!r} must be a positive integer or None")
    _THREADS = n


def threads() -> int:
    return _THREADS or os.cpu_count() or 1


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's output function (uint64 arithmetic wraps)."""
    z = np.asarray(z, np.uint64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _bits(x64: np.ndarray) -> np.ndarray:
    """float64 [..., n] -> uint32 [..., 2n] (the same bytes)."""
    return np.ascontiguousarray(x64, np.float64).view(np.uint32)


def _float64(bits: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(bits, np.uint32).view(np.float64)


class _Workers:
    """One caller's ``MjData`` per thread and the threads themselves."""

    def __init__(self, model, n: int):
        import mujoco

        self.n = n
        self.datas = [mujoco.MjData(model) for _ in range(n)]
        self.pool = ThreadPoolExecutor(n, thread_name_prefix="mujoco") if n > 1 else None

    def map(self, fn, n_items: int):
        """``fn(data, lo, hi)`` over contiguous slices of ``n_items``, one slice per thread."""
        # a few items (the resets of one step) run on the calling thread: handing them to the pool costs more
        k = max(1, min(self.n, n_items // 16))
        bounds = np.linspace(0, n_items, k + 1).astype(int)
        if self.pool is None or k == 1:
            fn(self.datas[0], 0, n_items)
            return
        futures = [self.pool.submit(fn, self.datas[i], bounds[i], bounds[i + 1]) for i in range(k)]
        for f in futures:
            f.result()


class Engine:
    """The host side of one task on MuJoCo's C engine: the model, its constants, a pool of workers."""

    def __init__(self, task: LocomotionTask):
        import mujoco

        self.task = task
        self.model = load_model(task)
        self.spec = mujoco.mjtState.mjSTATE_INTEGRATION
        self.state_size = int(mujoco.mj_stateSize(self.model, self.spec))
        self.consts = model_constants(task, self.model)
        self.nq, self.nv, self.nu = int(self.model.nq), int(self.model.nv), int(self.model.nu)
        data = mujoco.MjData(self.model)
        self.init_qpos = data.qpos.copy()
        self.init_qvel = data.qvel.copy()
        self.ctrl_range = np.asarray(self.model.actuator_ctrlrange, np.float32).copy()
        mjs = mujoco.mjtState
        offset = lambda bits: int(mujoco.mj_stateSize(self.model, bits))
        head = mjs.mjSTATE_TIME
        self._qpos_slice = slice(offset(head), offset(head | mjs.mjSTATE_QPOS))
        self._qvel_slice = slice(self._qpos_slice.stop, offset(head | mjs.mjSTATE_QPOS | mjs.mjSTATE_QVEL))
        before_ctrl = (mjs.mjSTATE_TIME | mjs.mjSTATE_QPOS | mjs.mjSTATE_QVEL | mjs.mjSTATE_ACT | mjs.mjSTATE_HISTORY
                       | mjs.mjSTATE_WARMSTART)
        self._ctrl_slice = slice(offset(before_ctrl), offset(before_ctrl) + self.nu)
        shapes = {"xpos": (self.model.nbody, 3), "xipos": (self.model.nbody, 3), "cinert": (self.model.nbody, 10),
                  "cvel": (self.model.nbody, 6), "cfrc_ext": (self.model.nbody, 6), "qfrc_actuator": (self.nv,),
                  "ctrl": (self.nu,), "site_xpos": (self.model.nsite, 3), "qfrc_constraint": (self.nv,)}
        self._derived_shapes = {f: shapes[f] for f in task.read_fields()}  # the fields the definition reads
        mujoco.mj_resetData(self.model, data)
        self._reset_row = np.empty(self.state_size)
        mujoco.mj_getState(self.model, data, self._reset_row, self.spec)
        self._view_cache: dict[int, tuple] = {}
        self._free: list[_Workers] = []
        self._batches: dict[tuple[int, int], list] = {}
        # MuJoCo's batch steps rows in C++ threads; a task whose observation needs mj_rnePostConstraint
        # after the step (Humanoid's contact forces) steps on our own thread pool instead
        self.uses_batch = _HAS_BATCH and not task.needs_rne_post
        self._lock = threading.Lock()

    # ----- the pool: each call owns its workers for the call's length
    def _checkout(self) -> _Workers:
        with self._lock:
            for i, w in enumerate(self._free):
                if w.n == threads():
                    return self._free.pop(i)
        return _Workers(self.model, threads())

    def _checkin(self, w: _Workers) -> None:
        with self._lock:
            self._free.append(w)

    def _field_buffers(self, n: int) -> dict:
        d = {"qpos": np.empty((n, self.nq)), "qvel": np.empty((n, self.nv))}
        for f, shape in self._derived_shapes.items():
            d[f] = np.empty((n,) + shape)
        return d

    def _read(self, data, fields: dict, i: int) -> None:
        fields["qpos"][i] = data.qpos
        fields["qvel"][i] = data.qvel
        for f in self._derived_shapes:
            fields[f][i] = getattr(data, f)

    def reset_states(self, keys: np.ndarray, episodes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The reset qpos and qvel of a batch of envs: each env's stream of 53-bit uniforms is SplitMix64
        seeded by its key (two uint32 words the program carries) and the number of its episode, so a run
        is a pure function of its seed and the program draws nothing per step; then the task's own reset
        (``LocomotionTask.reset_state``)."""
        k = keys.astype(np.uint64)
        seed = _mix64((k[:, 0] << np.uint64(32)) | k[:, 1]) ^ _mix64(episodes.astype(np.uint64) + np.uint64(1))
        count = self.task.uniforms_per_reset(self.nq, self.nv)
        z = _mix64(seed[:, None] + _GOLDEN * np.arange(1, count + 1, dtype=np.uint64)[None, :])
        u = (z >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
        return self.task.reset_state(np, u, self.init_qpos, self.init_qvel)

    def _reset_one(self, data, qpos: np.ndarray, qvel: np.ndarray, fields: dict, i: int, state_out: np.ndarray) -> None:
        """Gymnasium's reset: ``mj_resetData``, the reset's qpos and qvel, ``mj_forward``."""
        import mujoco

        mujoco.mj_resetData(self.model, data)
        data.qpos[:] = qpos
        data.qvel[:] = qvel
        mujoco.mj_forward(self.model, data)
        mujoco.mj_getState(self.model, data, state_out, self.spec)
        self._read(data, fields, i)

    # ----- the host functions the callbacks call (flat batches)
    def host_reset(self, keys: np.ndarray, episodes: np.ndarray):
        n = keys.shape[0]
        qpos, qvel = self.reset_states(keys, episodes)
        if not self._derived_shapes:
            # The observation and the forward position read qpos and qvel alone: the reset state is the
            # model's default state row with the noisy qpos and qvel (mj_forward writes no part of the
            # state), built for the whole batch at once
            states = np.repeat(self._reset_row[None], n, axis=0)
            states[:, self._qpos_slice] = qpos
            states[:, self._qvel_slice] = qvel
            fields = {"qpos": states[:, self._qpos_slice], "qvel": states[:, self._qvel_slice]}
            return states, self._position(fields), self._obs(fields)
        states = np.empty((n, self.state_size))
        fields = self._field_buffers(n)

        def work(data, lo, hi):
            for i in range(lo, hi):
                self._reset_one(data, qpos[i], qvel[i], fields, i, states[i])

        self._run(work, n)
        return states, self._position(fields), self._obs(fields)

    def host_step(self, states_in: np.ndarray, position: np.ndarray, action: np.ndarray, keys: np.ndarray,
                  episodes: np.ndarray, ends: np.ndarray, auto_reset: bool):
        """Step every env; then, with ``auto_reset``, reset those that terminated or whose ``ends`` is set
        (their episode reaches its time limit with this step; the next episode's number is ``episodes + 1``).
        Returns the states, forward positions and observations to continue from, the observations this
        step reached, reward, terminated, unstable, and each env's episode number."""
        states_in = states_in.copy()
        states_in[:, self._ctrl_slice] = action  # the controls are part of the state mj_setState sets
        if self.uses_batch:
            states, derived, unstable = self._step_batch(states_in)
        else:
            states, derived, unstable = self._step_loop(states_in)
        fields = {"qpos": states[:, self._qpos_slice], "qvel": states[:, self._qvel_slice], **derived}
        after = self._position(fields)
        reward = self.task.reward(np, position, after, action, fields, self.consts["dt"])
        terminated = self.task.terminated(np, fields) | unstable
        next_obs = self._obs(fields)
        obs, new_position, episodes = next_obs.copy(), after.copy(), episodes.copy()
        if auto_reset:
            resets = np.nonzero(terminated | ends)[0]
            if resets.size:
                episodes[resets] += 1
                r_states, r_position, r_obs = self.host_reset(keys[resets], episodes[resets])
                states[resets], new_position[resets], obs[resets] = r_states, r_position, r_obs
        return states, new_position, obs, next_obs, reward, terminated, unstable, episodes

    def _step_batch(self, states_in: np.ndarray):
        """MuJoCo's own threaded batch (``mujoco.batch``): each row loaded into an MjData of a C++ thread,
        ``mj_step`` ``frame_skip`` times, saved back; the bound derived fields copied out."""
        n = states_in.shape[0]
        b, views, key = self._checkout_batch(n)
        try:
            bad = b.warning[:, 3:7, 1].sum(axis=1)  # BADQPOS, BADQVEL, BADQACC, BADCTRL counters of each row
            b.state[:] = states_in
            b.step(nstep=self.task.frame_skip)
            unstable = b.warning[:, 3:7, 1].sum(axis=1) != bad
            return b.state.copy(), {f: v.copy() for f, v in views.items()}, unstable
        finally:
            self._checkin_batch(key, b, views)

    def _step_loop(self, states_in: np.ndarray):
        """A thread pool of our own over ``MjData``: needed where Gymnasium calls ``mj_rnePostConstraint``
        after the step (the batch does not)."""
        import mujoco

        n = states_in.shape[0]
        states = np.empty_like(states_in)
        derived = {f: np.empty((n,) + shape) for f, shape in self._derived_shapes.items()}
        unstable = np.zeros(n, bool)
        model, spec, frame_skip, rne = self.model, self.spec, self.task.frame_skip, self.task.needs_rne_post
        set_state, get_state, mj_step = mujoco.mj_setState, mujoco.mj_getState, mujoco.mj_step
        post = mujoco.mj_rnePostConstraint

        def work(data, lo, hi):
            warnings, views = self._views(data)
            # MuJoCo counts BADQPOS, BADQVEL and BADQACC (3, 4, 5) when it resets the data of a step it
            # could not integrate, and BADCTRL (6) when it zeroes a non-finite or huge control; mj_setState
            # leaves the counters alone, so a change marks this env
            bad = int(warnings[3] + warnings[4] + warnings[5] + warnings[6])
            for i in range(lo, hi):
                set_state(model, data, states_in[i], spec)
                mj_step(model, data, frame_skip)
                if rne:
                    post(model, data)
                now = int(warnings[3] + warnings[4] + warnings[5] + warnings[6])
                unstable[i], bad = now != bad, now
                get_state(model, data, states[i], spec)
                for f, v in views:
                    derived[f][i] = v

        self._run(work, n)
        return states, derived, unstable

    def _checkout_batch(self, n: int):
        """A free batch of ``n`` rows for the threads asked for now, its bound views, and the pool's key.
        The key is what was asked for, not the batch's ``nthread``: MuJoCo runs fewer threads than asked
        when there are fewer rows (1 row: 1 thread), and a batch returned under its own ``nthread`` would
        never be found again: a new batch per step, each kept."""
        key = (n, threads())
        with self._lock:
            free = self._batches.setdefault(key, [])
            if free:
                return free.pop() + (key,)
        from mujoco import batch as mj_batch

        b = mj_batch.Batch(self.model, n, key[1])
        return b, {f: b.bind(f) for f in self._derived_shapes}, key

    def _checkin_batch(self, key: tuple, b, views) -> None:
        with self._lock:
            self._batches.setdefault(key, []).append((b, views))

    def _views(self, data):
        """Cached numpy views into ``data``: its warning counters and the derived fields the task reads."""
        cached = self._view_cache.get(id(data))
        if cached is None or cached[0] is not data:
            views = [(f, getattr(data, f)) for f in self._derived_shapes]
            cached = (data, data.warning.number, views)
            self._view_cache[id(data)] = cached
        return cached[1], cached[2]

    def _run(self, work, n: int) -> None:
        w = self._checkout()
        try:
            w.map(work, n)
        finally:
            self._checkin(w)

    def _position(self, fields):
        return self.task.forward_position(np, fields, self.consts)

    def _obs(self, fields):
        return self.task.observation(np, fields, self.consts).astype(np.float32)


_ENGINES: dict[str, Engine] = {}
_ENGINES_LOCK = threading.Lock()


def engine(name: str) -> Engine:
    with _ENGINES_LOCK:
        if name not in _ENGINES:
            _ENGINES[name] = Engine(GYM_TASKS[name])
        return _ENGINES[name]


# ----------------------------------------------------------------------------- the JAX side


@struct.dataclass
class CState:
    """A C-engine env's state (with the fields of a ``brax.envs.State`` the wrappers read)."""

    physics: jnp.ndarray  # uint32 [2 * state_size]: mj_getState(mjSTATE_INTEGRATION), float64 bits
    position: jnp.ndarray  # uint32 [4]: the forward position (x, y; Reacher: a distance) after the last step, float64 bits
    key: jnp.ndarray  # uint32 [2]: this env's reset-noise key (the host derives each episode's noise from it)
    episode: jnp.ndarray  # int32: episodes this env began (0: the first); numbers its reset noise
    obs: jnp.ndarray  # float32 [obs]
    reward: jnp.ndarray  # float32
    done: jnp.ndarray  # float32: the task terminated (or MuJoCo flagged the step unstable)
    unstable_steps: jnp.ndarray  # int32: steps MuJoCo flagged unstable in this env so far
    metrics: dict = struct.field(default_factory=dict)
    info: dict = struct.field(default_factory=dict)


def _flat(x: np.ndarray, tail: int) -> tuple[np.ndarray, tuple]:
    lead = x.shape[: x.ndim - tail]
    return x.reshape((-1,) + x.shape[x.ndim - tail:]), lead


class CEngineEnv:
    """A Gymnasium task stepped by MuJoCo's C engine: raw ``reset(key)`` / ``step(state, action)``
    (no auto-reset, like a Brax env), and ``step_auto_reset`` for the training wrapper."""

    def __init__(self, name: str):
        self.name = name
        self.task = GYM_TASKS[name]
        eng = engine(name)
        self.observation_size = self.task.observation_size
        self.action_size = eng.nu
        self.action_low = eng.ctrl_range[:, 0]
        self.action_high = eng.ctrl_range[:, 1]
        self._state_words = 2 * eng.state_size

    def _shapes(self):
        f32, u32 = jnp.float32, jnp.uint32
        return (jax.ShapeDtypeStruct((self._state_words,), u32), jax.ShapeDtypeStruct((4,), u32),
                jax.ShapeDtypeStruct((self.observation_size,), f32))

    def reset(self, key: jax.Array) -> CState:
        name = self.name
        key = jnp.asarray(jax.random.key_data(key) if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
                          else key, jnp.uint32)
        episode = jnp.zeros((), jnp.int32)

        def host(k, e):
            flat, lead = _flat(np.asarray(k), 1)
            states, position, obs = engine(name).host_reset(flat, np.asarray(e).reshape(-1))
            return (_bits(states).reshape(lead + (-1,)), _bits(position).reshape(lead + (4,)),
                    obs.reshape(lead + obs.shape[1:]))

        physics, position, obs = jax.pure_callback(host, self._shapes(), key, episode, vmap_method="broadcast_all")
        zero = jnp.zeros((), jnp.float32)
        return CState(physics=physics, position=position, key=key, episode=episode, obs=obs, reward=zero,
                      done=zero, unstable_steps=jnp.zeros((), jnp.int32))

    def _call(self, state: CState, action, ends, auto_reset: bool):
        name = self.name
        f32 = jnp.float32
        shapes = self._shapes() + (jax.ShapeDtypeStruct((self.observation_size,), f32),
                                   jax.ShapeDtypeStruct((), f32), jax.ShapeDtypeStruct((), jnp.bool_),
                                   jax.ShapeDtypeStruct((), jnp.bool_), jax.ShapeDtypeStruct((), jnp.int32))

        def host(physics, position, act, k, episode, e):
            physics, lead = _flat(np.asarray(physics), 1)
            out = engine(name).host_step(
                _float64(physics), _float64(_flat(np.asarray(position), 1)[0]), _flat(np.asarray(act), 1)[0],
                _flat(np.asarray(k), 1)[0], np.asarray(episode).reshape(-1), np.asarray(e).reshape(-1), auto_reset)
            states, new_position, obs, next_obs, reward, terminated, unstable, episodes = out
            return (_bits(states).reshape(lead + (-1,)), _bits(new_position).reshape(lead + (4,)),
                    obs.reshape(lead + obs.shape[1:]), next_obs.reshape(lead + next_obs.shape[1:]),
                    reward.astype(np.float32).reshape(lead), terminated.reshape(lead), unstable.reshape(lead),
                    episodes.astype(np.int32).reshape(lead))

        action = jnp.asarray(action, f32)
        if action.shape != (self.action_size,):
            raise ValueError(f"{self.name}: an action has shape ({self.action_size},), got {action.shape}")
        out = jax.pure_callback(host, shapes, state.physics, state.position, action, state.key, state.episode,
                                jnp.asarray(ends, jnp.bool_), vmap_method="broadcast_all")
        physics, position, obs, next_obs, reward, terminated, unstable, episode = out
        nxt = state.replace(physics=physics, position=position, episode=episode, obs=obs, reward=reward,
                            done=terminated.astype(f32),
                            unstable_steps=state.unstable_steps + unstable.astype(jnp.int32))
        return nxt, next_obs

    def step(self, state: CState, action) -> CState:
        """One env step without reset (evaluation freezes an ended episode itself)."""
        nxt, next_obs = self._call(state, action, False, auto_reset=False)
        return nxt.replace(obs=next_obs)

    def step_auto_reset(self, state: CState, action, ends) -> tuple[CState, jnp.ndarray]:
        """One env step; an env that terminated, or whose ``ends`` is set, is reset on the host in the same
        call (fresh reset noise, as Gymnasium's ``reset``). Returns the state to continue from (its ``obs``
        the first observation of the next episode after a reset) and the observation this step reached."""
        return self._call(state, action, ends, auto_reset=True)
