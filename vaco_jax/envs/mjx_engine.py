"""A Gymnasium task's definition stepped by MJX (the accelerator path).

The same model file and the same definition as on MuJoCo's C engine (``gymnasium_tasks``), evaluated
in ``jax.numpy`` on ``mjx.Data``. MJX treats some of the features Gymnasium's models use differently
from the C engine (RK4 is its own implementation, contacts and solver settings differ), so its numbers
are not expected to equal Gymnasium's; only that it loads and steps the task. Like Brax's tasks this raw
env never resets itself: ``envs.make_env``'s wrapper adds truncation and returns an ended episode to
the initial state that env drew at reset.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from vaco_jax.envs.gymnasium_tasks import GYM_TASKS, load_model, model_constants


@struct.dataclass
class MjxTaskState:
    pipeline_state: object  # mjx.Data
    position: jnp.ndarray  # float32 [2]: the forward-reward position read after the last step
    obs: jnp.ndarray
    reward: jnp.ndarray
    done: jnp.ndarray
    metrics: dict = struct.field(default_factory=dict)
    info: dict = struct.field(default_factory=dict)


class MjxTaskEnv:
    def __init__(self, name: str):
        from mujoco import mjx

        self.task = GYM_TASKS[name]
        model = load_model(self.task)
        self._mjx = mjx
        self.model = mjx.put_model(model)
        consts = model_constants(self.task, model)
        self._dt = consts["dt"]
        self._consts = {k: (jnp.asarray(v, jnp.float32) if isinstance(v, np.ndarray) else v)
                        for k, v in consts.items()}
        self._init_qpos = jnp.asarray(model.qpos0, jnp.float32)
        self._init_qvel = jnp.zeros((model.nv,), jnp.float32)
        self.observation_size = self.task.observation_size
        self.action_size = int(model.nu)
        self.action_low = np.asarray(model.actuator_ctrlrange[:, 0], np.float32)
        self.action_high = np.asarray(model.actuator_ctrlrange[:, 1], np.float32)

    def _fields(self, data) -> dict:
        fields = {"qpos": data.qpos, "qvel": data.qvel}
        for f in self.task.read_fields():
            fields[f] = getattr(data, f)
        return fields

    def reset(self, key):
        nq, nv = self._init_qpos.shape[0], self._init_qvel.shape[0]
        u = jax.random.uniform(key, (self.task.uniforms_per_reset(nq, nv),))
        qpos, qvel = self.task.reset_state(jnp, u, self._init_qpos, self._init_qvel)
        data = self._mjx.forward(self.model, self._mjx.make_data(self.model).replace(qpos=qpos, qvel=qvel))
        fields = self._fields(data)
        zero = jnp.zeros((), jnp.float32)
        return MjxTaskState(pipeline_state=data, position=self.task.forward_position(jnp, fields, self._consts),
                            obs=self.task.observation(jnp, fields, self._consts), reward=zero, done=zero)

    def step(self, state: MjxTaskState, action):
        data = state.pipeline_state.replace(ctrl=action)
        data = jax.lax.fori_loop(0, self.task.frame_skip, lambda _, d: self._mjx.step(self.model, d), data)
        fields = self._fields(data)
        after = self.task.forward_position(jnp, fields, self._consts)
        reward = self.task.reward(jnp, state.position, after, action, fields, self._dt)
        done = self.task.terminated(jnp, fields).astype(jnp.float32)
        return state.replace(pipeline_state=data, position=after, obs=self.task.observation(jnp, fields, self._consts),
                             reward=reward.astype(jnp.float32), done=done)


def make(name: str) -> MjxTaskEnv:
    return MjxTaskEnv(name)
