"""Gymnasium's MuJoCo tasks (the locomotion tasks, HumanoidStandup, Swimmer, the inverted pendulums and
Reacher), defined as Gymnasium 1.4.0 defines them, for any engine.

A task here is a model file plus its definition: which MuJoCo fields it reads after a step, its
observation, reward, termination and reset noise. The definition never steps physics: an engine
(MuJoCo's C engine, ``envs.cengine``; MJX, ``envs.mjx_engine``) steps the model and hands the
definition the fields it names, as arrays with a leading batch axis, in ``numpy`` or ``jax.numpy``
(the ``xp`` argument). docs/envs.md, "Gymnasium's locomotion tasks", gives each definition in words.

Gymnasium reads some fields that MuJoCo derives during a step rather than from the state (body
positions for Ant's and Humanoid's forward reward, Humanoid's inertias, velocities and forces): after a
step they hold the values of the last substep's forward pass. Engines therefore read them right after
the step, as Gymnasium does, and carry the forward-reward position into the next step (``position``)
instead of recomputing it from the state.

The model files are read from the installed Gymnasium package; nothing is copied here.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
from typing import Callable

import numpy as np

from vaco_jax.errors import ConfigError

GYMNASIUM_VERSION = "1.4.0"  # the version these definitions were checked against (tests/test_gym_tasks.py)
INSTALL_HINT = f"pip install 'gymnasium[mujoco]=={GYMNASIUM_VERSION}'"


def _hopper_healthy(xp, qpos, qvel):
    z, angle = qpos[..., 1], qpos[..., 2]
    state = xp.concatenate([qpos, qvel], axis=-1)[..., 2:]
    return (xp.all((-100.0 < state) & (state < 100.0), axis=-1) & (0.7 < z) & (z < np.inf)
            & (-0.2 < angle) & (angle < 0.2))


def _walker_healthy(xp, qpos, qvel):
    z, angle = qpos[..., 1], qpos[..., 2]
    return (0.8 < z) & (z < 2.0) & (-1.0 < angle) & (angle < 1.0)


def _ant_healthy(xp, qpos, qvel):
    finite = xp.all(xp.isfinite(xp.concatenate([qpos, qvel], axis=-1)), axis=-1)
    return finite & (0.2 <= qpos[..., 2]) & (qpos[..., 2] <= 1.0)


def _humanoid_healthy(xp, qpos, qvel):
    return (1.0 < qpos[..., 2]) & (qpos[..., 2] < 2.0)


def _inverted_pendulum_healthy(xp, qpos, qvel):
    finite = xp.all(xp.isfinite(xp.concatenate([qpos, qvel], axis=-1)), axis=-1)
    return finite & (xp.abs(qpos[..., 1]) <= 0.2)


@dataclasses.dataclass(frozen=True)
class LocomotionTask:
    """One Gymnasium locomotion task (its constructor's defaults; Gymnasium's ``*_v4.py``, ``*_v5.py``)."""

    name: str
    model_file: str  # in gymnasium/envs/mujoco/assets
    frame_skip: int
    observation_size: int
    forward_reward_weight: float
    ctrl_cost_weight: float
    healthy_reward: float  # v4: paid on every step, the terminating one included; v5: see healthy_reward_if_healthy
    healthy: Callable | None  # (xp, qpos, qvel) -> bool[batch]; None: never terminates
    position: str  # what the forward reward differentiates: 'qpos_x', 'torso_xy' or 'mass_center_xy'
    obs_exclude: int  # leading qpos entries left out of the observation
    qvel_clip: float | None  # the observation's velocities are clipped to +-this (Hopper, Walker2d)
    obs_fields: tuple[str, ...] = ()  # MjData fields appended to the observation, flattened, in order
    obs_fields_from: tuple[int, ...] = ()  # per obs field: leading rows left out (v5: the world body; 6 free-joint dofs)
    obs_force_clip: float | None = None  # cfrc_ext in the observation clipped to +-this (Ant-v5)
    healthy_reward_if_healthy: bool = False  # v5: the healthy reward only on healthy steps (0 on the terminating one)
    contact_cost_weight: float = 0.0  # v5: this times the sum of squared cfrc_ext (every body)
    contact_cost_max: float | None = None  # v5 Humanoid: the contact cost clipped to at most this
    reset_noise_scale: float = 0.0
    qvel_noise: str = "uniform"  # 'uniform' on [-s, s], or 'normal' (s times a standard normal)
    ctrl_cost_of: str = "action"  # 'action' (the action as given) or 'ctrl' (data.ctrl, float64)
    max_episode_steps: int = 1000  # Gymnasium's registered TimeLimit
    bodies: tuple[str, ...] = ()  # bodies whose index the definition reads (consts[name]; Reacher, Pusher)

    @property
    def needs_rne_post(self) -> bool:
        """Gymnasium calls mj_rnePostConstraint after every step; only cfrc_ext reads its result."""
        return "cfrc_ext" in self.read_fields()

    def read_fields(self) -> tuple[str, ...]:
        """The MjData fields an engine hands the definition after a step (besides qpos and qvel)."""
        extra = {"torso_xy": ("xpos",), "mass_center_xy": ("xipos",)}.get(self.position, ())
        ctrl = ("ctrl",) if self.ctrl_cost_of == "ctrl" else ()
        contact = ("cfrc_ext",) if self.contact_cost_weight else ()
        return tuple(dict.fromkeys(extra + self.obs_fields + ctrl + contact))

    # ----- the definition proper; every function takes batched arrays ([..., n])
    def observation(self, xp, fields: dict, consts: dict):
        qpos, qvel = fields["qpos"], fields["qvel"]
        vel = qvel if self.qvel_clip is None else xp.clip(qvel, -self.qvel_clip, self.qvel_clip)
        lead = qpos.shape[:-1]
        parts = [qpos[..., self.obs_exclude:], vel]
        skips = self.obs_fields_from or (0,) * len(self.obs_fields)
        for f, skip in zip(self.obs_fields, skips):
            x = fields[f][(slice(None),) * len(lead) + (slice(skip, None),)]
            if f == "cfrc_ext" and self.obs_force_clip is not None:
                x = xp.clip(x, -self.obs_force_clip, self.obs_force_clip)
            parts.append(xp.reshape(x, lead + (-1,)))
        return xp.concatenate(parts, axis=-1)

    def forward_position(self, xp, fields: dict, consts: dict):
        """[..., 2] (x, y); tasks that move along x alone put 0 in y."""
        if self.position == "qpos_x":
            x = fields["qpos"][..., 0]
            return xp.stack([x, xp.zeros_like(x)], axis=-1)
        if self.position == "torso_xy":
            return fields["xpos"][..., consts["torso"], :2]
        if self.position == "mass_center_xy":
            mass = consts["body_mass"]
            return xp.einsum("b,...bj->...j", mass, fields["xipos"])[..., :2] / mass.sum()
        raise ValueError(self.position)

    def reward(self, xp, before, after, action, fields: dict, dt: float):
        """Gymnasium's reward from the forward positions before and after the step."""
        x_velocity = (after[..., 0] - before[..., 0]) / dt
        ctrl = fields["ctrl"] if self.ctrl_cost_of == "ctrl" else action
        ctrl_cost = self.ctrl_cost_weight * xp.sum(xp.square(ctrl), axis=-1)
        healthy = self.healthy_reward
        if self.healthy_reward_if_healthy and self.healthy is not None:
            healthy = self.healthy_reward * self.healthy(xp, fields["qpos"], fields["qvel"])
        # a task without a forward reward (InvertedPendulum) pays its healthy reward even where the state
        # is no longer finite, as Gymnasium does: 0 times a non-finite velocity would be nan
        forward = self.forward_reward_weight * x_velocity if self.forward_reward_weight else 0.0
        reward = forward + healthy - ctrl_cost
        if self.contact_cost_weight:
            forces = fields["cfrc_ext"]
            if self.obs_force_clip is not None:  # Ant-v5 charges the clipped forces
                forces = xp.clip(forces, -self.obs_force_clip, self.obs_force_clip)
            lead = forces.shape[:x_velocity.ndim]
            contact = self.contact_cost_weight * xp.sum(xp.square(xp.reshape(forces, lead + (-1,))), axis=-1)
            if self.contact_cost_max is not None:
                contact = xp.minimum(contact, self.contact_cost_max)
            reward = reward - contact
        return reward

    def terminated(self, xp, fields: dict):
        if self.healthy is None:
            return xp.zeros(fields["qpos"].shape[:-1], bool)
        return ~self.healthy(xp, fields["qpos"], fields["qvel"])

    def reset_state(self, xp, u, init_qpos, init_qvel):
        """The reset's qpos and qvel ([..., nq], [..., nv]) from uniforms ``u`` [..., uniforms_per_reset]
        on [0, 1): the model's initial state plus ``reset_noise``."""
        dq, dv = self.reset_noise(xp, u, init_qpos.shape[-1], init_qvel.shape[-1])
        return init_qpos + dq, init_qvel + dv

    def uniforms_per_reset(self, nq: int, nv: int) -> int:
        """Uniforms on [0, 1) one reset reads: one per qpos entry, one (or two for a normal) per qvel."""
        return nq + (2 if self.qvel_noise == "normal" else 1) * nv

    def reset_noise(self, xp, u, nq: int, nv: int):
        """The noise Gymnasium's ``reset_model`` adds to the model's initial qpos and qvel, from uniforms
        ``u`` [..., uniforms_per_reset] on [0, 1): uniform on [-s, s], or s times a standard normal (from
        two uniforms, Box-Muller)."""
        s = self.reset_noise_scale
        dq = -s + 2.0 * s * u[..., :nq]
        if self.qvel_noise == "uniform":
            return dq, -s + 2.0 * s * u[..., nq:nq + nv]
        u1, u2 = 1.0 - u[..., nq:nq + nv], u[..., nq + nv:nq + 2 * nv]  # 1 - u in (0, 1]: a finite log
        return dq, s * xp.sqrt(-2.0 * xp.log(u1)) * xp.cos(2.0 * np.pi * u2)


@dataclasses.dataclass(frozen=True)
class InvertedDoublePendulumTask(LocomotionTask):
    """Gymnasium's InvertedDoublePendulum: its reward and termination read the pole tip (the model's
    first site, ``site_xpos`` after the step); its observation is the cart's position, the sines and
    cosines of the two hinge angles, the velocities clipped to +-10 and the leading constraint forces
    (``qfrc_constraint``) clipped to +-10. The reward: the healthy reward (v5: on healthy steps only)
    minus 0.01 x_tip^2 + (z_tip - 2)^2 minus 1e-3 qvel[1]^2 + 5e-3 qvel[2]^2; it ends when z_tip <= 1."""

    constraint_obs: int = 3  # leading qfrc_constraint entries observed (v4: all 3; v5: 1)

    def read_fields(self) -> tuple[str, ...]:
        return ("site_xpos", "qfrc_constraint")

    def observation(self, xp, fields: dict, consts: dict):
        qpos, qvel = fields["qpos"], fields["qvel"]
        return xp.concatenate([qpos[..., :1], xp.sin(qpos[..., 1:]), xp.cos(qpos[..., 1:]), xp.clip(qvel, -10.0, 10.0),
                               xp.clip(fields["qfrc_constraint"][..., :self.constraint_obs], -10.0, 10.0)], axis=-1)

    def reward(self, xp, before, after, action, fields: dict, dt: float):
        tip, qvel = fields["site_xpos"][..., 0, :], fields["qvel"]
        distance = 0.01 * tip[..., 0] ** 2 + (tip[..., 2] - 2.0) ** 2
        velocity = 1e-3 * qvel[..., 1] ** 2 + 5e-3 * qvel[..., 2] ** 2
        healthy = self.healthy_reward
        if self.healthy_reward_if_healthy:
            healthy = self.healthy_reward * ~self.terminated(xp, fields)
        return healthy - distance - velocity

    def terminated(self, xp, fields: dict):
        return fields["site_xpos"][..., 0, 2] <= 1.0


@dataclasses.dataclass(frozen=True)
class _BodyDistanceTask(LocomotionTask):
    """A task rewarded by distances between bodies (``xpos`` of the bodies it names, read after the
    step): ``forward_position`` gives them [..., 2], so the reward can read them before
    the step (``reward_before_step``, carried from the last step, as Gymnasium's v4 does) or after it."""

    reward_before_step: bool = True  # v4: the distances before the step; v5: after it

    def read_fields(self) -> tuple[str, ...]:
        return ("xpos",)

    def _body(self, fields: dict, consts: dict, name: str):
        return fields["xpos"][..., consts[name], :]

    def distance_reward(self, xp, distances, action):
        raise NotImplementedError

    def reward(self, xp, before, after, action, fields: dict, dt: float):
        return self.distance_reward(xp, before if self.reward_before_step else after, action)


@dataclasses.dataclass(frozen=True)
class ReacherTask(_BodyDistanceTask):
    """Gymnasium's Reacher: the fingertip-to-target vector (``xpos`` of bodies 'fingertip' and 'target')
    is observed after the step (v4: all 3 coordinates; v5: x and y); the reward is minus its length minus
    ||a||^2 — v4 measures the length before the step (carried from the last one as the forward position),
    v5 after it. A reset draws the arm's qpos uniform on +-0.1 around the model's, the target uniform in
    the disc of radius 0.2 (Gymnasium draws it by rejection from the square; here from its polar form:
    the same distribution), the arm's qvel uniform on +-0.005 and the target's 0. Never terminates."""

    vector_obs: int = 3  # leading coordinates of the fingertip-to-target vector observed (v4: 3; v5: 2)
    bodies: tuple[str, ...] = ("fingertip", "target")

    def _vector(self, xp, fields: dict, consts: dict):
        return self._body(fields, consts, "fingertip") - self._body(fields, consts, "target")

    def observation(self, xp, fields: dict, consts: dict):
        qpos, qvel = fields["qpos"], fields["qvel"]
        return xp.concatenate([xp.cos(qpos[..., :2]), xp.sin(qpos[..., :2]), qpos[..., 2:], qvel[..., :2],
                               self._vector(xp, fields, consts)[..., :self.vector_obs]], axis=-1)

    def forward_position(self, xp, fields: dict, consts: dict):
        """[..., 2]: the fingertip's distance to the target, and 0."""
        d = xp.sqrt(xp.sum(xp.square(self._vector(xp, fields, consts)), axis=-1))
        return xp.stack([d, xp.zeros_like(d)], axis=-1)

    def distance_reward(self, xp, distances, action):
        return -distances[..., 0] - xp.sum(xp.square(action), axis=-1)

    def uniforms_per_reset(self, nq: int, nv: int) -> int:
        return nq + nv + 2

    def reset_state(self, xp, u, init_qpos, init_qvel):
        nq, nv = init_qpos.shape[-1], init_qvel.shape[-1]
        arm = init_qpos[:-2] + (-0.1 + 0.2 * u[..., :nq - 2])
        radius, angle = 0.2 * xp.sqrt(u[..., nq + nv]), 2.0 * np.pi * u[..., nq + nv + 1]
        target = xp.stack([radius * xp.cos(angle), radius * xp.sin(angle)], axis=-1)
        arm_v = init_qvel[:-2] + (-0.005 + 0.01 * u[..., nq:nq + nv - 2])
        return (xp.concatenate([arm, target], axis=-1),
                xp.concatenate([arm_v, xp.zeros_like(u[..., nq + nv - 2:nq + nv])], axis=-1))


def _pusher_object_start(xp, u1, u2):
    """The object's start, uniform on [-0.3, 0] x [-0.2, 0.2] outside the disc of radius 0.17 around
    the goal (the origin) — what Gymnasium's rejection loop draws — from two uniforms: x by inverting
    its marginal distribution (bisection, 60 halvings), then y uniform on the part of [-0.2, 0.2] left
    at that x."""
    r2 = 0.17 ** 2

    def area_left_of(x):  # the region's area with first coordinate below x
        t = xp.clip(x, -0.17, 0.17)
        disc = 0.5 * (t * xp.sqrt(xp.maximum(r2 - t * t, 0.0)) + r2 * xp.arcsin(t / 0.17)) + r2 * np.pi / 4
        return 0.4 * (x + 0.3) - 2.0 * disc

    target = u1 * area_left_of(xp.zeros_like(u1))
    lo, hi = xp.full_like(u1, -0.3), xp.zeros_like(u1)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        below = area_left_of(mid) < target
        lo, hi = xp.where(below, mid, lo), xp.where(below, hi, mid)
    x = 0.5 * (lo + hi)
    h = xp.sqrt(xp.maximum(r2 - x * x, 0.0))  # the half-chord the disc takes out at x (0 left of -0.17)
    t = u2 * 2.0 * (0.2 - h)
    y = xp.where(t < 0.2 - h, -0.2 + t, h + (t - (0.2 - h)))
    return xp.stack([x, y], axis=-1)


@dataclasses.dataclass(frozen=True)
class PusherTask(_BodyDistanceTask):
    """Gymnasium's Pusher: the observation is the arm's 7 joint positions and velocities and the positions
    (``xpos``) of the arm's tip, the object and the goal; the reward is -||object - goal|| - 0.5
    ||object - tip|| - 0.1 ||a||^2, the distances after the step (``reward_before_step``: before it, as
    Gymnasium's Pusher-v4 does; that version needs mujoco < 3). A reset puts the arm at the model's pose,
    at rest but for a velocity uniform on +-0.005 per arm joint, the goal at the origin and the object
    uniform outside the disc of radius 0.17 around it (``_pusher_object_start``). Never terminates."""

    bodies: tuple[str, ...] = ("tips_arm", "object", "goal")

    def observation(self, xp, fields: dict, consts: dict):
        return xp.concatenate([fields["qpos"][..., :7], fields["qvel"][..., :7]]
                              + [self._body(fields, consts, b) for b in self.bodies], axis=-1)

    def forward_position(self, xp, fields: dict, consts: dict):
        """[..., 2]: the object's distance to the arm's tip, and to the goal."""
        obj = self._body(fields, consts, "object")
        near = xp.sqrt(xp.sum(xp.square(obj - self._body(fields, consts, "tips_arm")), axis=-1))
        far = xp.sqrt(xp.sum(xp.square(obj - self._body(fields, consts, "goal")), axis=-1))
        return xp.stack([near, far], axis=-1)

    def distance_reward(self, xp, distances, action):
        return -distances[..., 1] - 0.1 * xp.sum(xp.square(action), axis=-1) - 0.5 * distances[..., 0]

    def uniforms_per_reset(self, nq: int, nv: int) -> int:
        return nv + 2

    def reset_state(self, xp, u, init_qpos, init_qvel):
        nv = init_qvel.shape[-1]
        lead = u.shape[:-1]
        obj = _pusher_object_start(xp, u[..., nv], u[..., nv + 1])
        qpos = xp.concatenate([xp.broadcast_to(init_qpos[:-4], lead + (init_qpos.shape[-1] - 4,)), obj,
                               xp.zeros_like(obj)], axis=-1)
        arm_v = init_qvel[:-4] + (-0.005 + 0.01 * u[..., :nv - 4])
        return qpos, xp.concatenate([arm_v, xp.zeros(lead + (4,), arm_v.dtype)], axis=-1)


@dataclasses.dataclass(frozen=True)
class HumanoidStandupTask(LocomotionTask):
    """Gymnasium's HumanoidStandup: Humanoid's model lying down and its observation; the reward pays the
    torso's height over MuJoCo's timestep (the env step's dt over its frame skip), plus 1, minus
    0.1 ||ctrl||^2 and the contact cost min(5e-7 ||cfrc_ext||^2, 10). Never terminates."""

    def reward(self, xp, before, after, action, fields: dict, dt: float):
        up = fields["qpos"][..., 2] / (dt / self.frame_skip)
        return up + super().reward(xp, before, after, action, fields, dt)


GYM_TASKS: dict[str, LocomotionTask] = {t.name: t for t in (
    LocomotionTask("Hopper-v4", "hopper.xml", 4, 11, forward_reward_weight=1.0, ctrl_cost_weight=1e-3,
                   healthy_reward=1.0, healthy=_hopper_healthy, position="qpos_x", obs_exclude=1,
                   qvel_clip=10.0, reset_noise_scale=5e-3),
    LocomotionTask("Walker2d-v4", "walker2d.xml", 4, 17, forward_reward_weight=1.0, ctrl_cost_weight=1e-3,
                   healthy_reward=1.0, healthy=_walker_healthy, position="qpos_x", obs_exclude=1,
                   qvel_clip=10.0, reset_noise_scale=5e-3),
    LocomotionTask("HalfCheetah-v4", "half_cheetah.xml", 5, 17, forward_reward_weight=1.0,
                   ctrl_cost_weight=0.1, healthy_reward=0.0, healthy=None, position="qpos_x", obs_exclude=1,
                   qvel_clip=None, reset_noise_scale=0.1, qvel_noise="normal"),
    LocomotionTask("Ant-v4", "ant.xml", 5, 27, forward_reward_weight=1.0, ctrl_cost_weight=0.5,
                   healthy_reward=1.0, healthy=_ant_healthy, position="torso_xy", obs_exclude=2,
                   qvel_clip=None, reset_noise_scale=0.1, qvel_noise="normal"),
    LocomotionTask("Humanoid-v4", "humanoid.xml", 5, 376, forward_reward_weight=1.25, ctrl_cost_weight=0.1,
                   healthy_reward=5.0, healthy=_humanoid_healthy, position="mass_center_xy", obs_exclude=2,
                   qvel_clip=None, obs_fields=("cinert", "cvel", "qfrc_actuator", "cfrc_ext"),
                   reset_noise_scale=1e-2, ctrl_cost_of="ctrl"),
    # v5 (Gymnasium 1.x): the healthy reward only on healthy steps; Walker2d's own model (both feet alike);
    # Ant's observation adds its clipped contact forces and its reward a contact cost; Humanoid leaves the
    # world body (and the free joint's 6 actuator dofs) out of its observation and charges contact forces.
    LocomotionTask("Hopper-v5", "hopper.xml", 4, 11, forward_reward_weight=1.0, ctrl_cost_weight=1e-3,
                   healthy_reward=1.0, healthy=_hopper_healthy, position="qpos_x", obs_exclude=1,
                   qvel_clip=10.0, reset_noise_scale=5e-3, healthy_reward_if_healthy=True),
    LocomotionTask("Walker2d-v5", "walker2d_v5.xml", 4, 17, forward_reward_weight=1.0, ctrl_cost_weight=1e-3,
                   healthy_reward=1.0, healthy=_walker_healthy, position="qpos_x", obs_exclude=1,
                   qvel_clip=10.0, reset_noise_scale=5e-3, healthy_reward_if_healthy=True),
    LocomotionTask("HalfCheetah-v5", "half_cheetah.xml", 5, 17, forward_reward_weight=1.0,
                   ctrl_cost_weight=0.1, healthy_reward=0.0, healthy=None, position="qpos_x", obs_exclude=1,
                   qvel_clip=None, reset_noise_scale=0.1, qvel_noise="normal"),
    LocomotionTask("Ant-v5", "ant.xml", 5, 105, forward_reward_weight=1.0, ctrl_cost_weight=0.5,
                   healthy_reward=1.0, healthy=_ant_healthy, position="torso_xy", obs_exclude=2,
                   qvel_clip=None, obs_fields=("cfrc_ext",), obs_fields_from=(1,), obs_force_clip=1.0,
                   reset_noise_scale=0.1, qvel_noise="normal", healthy_reward_if_healthy=True,
                   contact_cost_weight=5e-4),
    LocomotionTask("Humanoid-v5", "humanoid.xml", 5, 348, forward_reward_weight=1.25, ctrl_cost_weight=0.1,
                   healthy_reward=5.0, healthy=_humanoid_healthy, position="mass_center_xy", obs_exclude=2,
                   qvel_clip=None, obs_fields=("cinert", "cvel", "qfrc_actuator", "cfrc_ext"),
                   obs_fields_from=(1, 1, 6, 1), reset_noise_scale=1e-2, ctrl_cost_of="ctrl",
                   healthy_reward_if_healthy=True, contact_cost_weight=5e-7, contact_cost_max=10.0),
    # the other tasks (each v5 differs from its v4 only where the arguments differ)
    LocomotionTask("Swimmer-v4", "swimmer.xml", 4, 8, forward_reward_weight=1.0, ctrl_cost_weight=1e-4,
                   healthy_reward=0.0, healthy=None, position="qpos_x", obs_exclude=2, qvel_clip=None,
                   reset_noise_scale=0.1),
    LocomotionTask("Swimmer-v5", "swimmer.xml", 4, 8, forward_reward_weight=1.0, ctrl_cost_weight=1e-4,
                   healthy_reward=0.0, healthy=None, position="qpos_x", obs_exclude=2, qvel_clip=None,
                   reset_noise_scale=0.1),
    LocomotionTask("InvertedPendulum-v4", "inverted_pendulum.xml", 2, 4, forward_reward_weight=0.0,
                   ctrl_cost_weight=0.0, healthy_reward=1.0, healthy=_inverted_pendulum_healthy, position="qpos_x",
                   obs_exclude=0, qvel_clip=None, reset_noise_scale=0.01),
    LocomotionTask("InvertedPendulum-v5", "inverted_pendulum.xml", 2, 4, forward_reward_weight=0.0,
                   ctrl_cost_weight=0.0, healthy_reward=1.0, healthy=_inverted_pendulum_healthy, position="qpos_x",
                   obs_exclude=0, qvel_clip=None, reset_noise_scale=0.01, healthy_reward_if_healthy=True),
    InvertedDoublePendulumTask("InvertedDoublePendulum-v4", "inverted_double_pendulum.xml", 5, 11,
                               forward_reward_weight=0.0, ctrl_cost_weight=0.0, healthy_reward=10.0, healthy=None,
                               position="qpos_x", obs_exclude=0, qvel_clip=None, reset_noise_scale=0.1,
                               qvel_noise="normal"),
    InvertedDoublePendulumTask("InvertedDoublePendulum-v5", "inverted_double_pendulum.xml", 5, 9,
                               forward_reward_weight=0.0, ctrl_cost_weight=0.0, healthy_reward=10.0, healthy=None,
                               position="qpos_x", obs_exclude=0, qvel_clip=None, reset_noise_scale=0.1,
                               qvel_noise="normal", healthy_reward_if_healthy=True, constraint_obs=1),
    HumanoidStandupTask("HumanoidStandup-v4", "humanoidstandup.xml", 5, 376, forward_reward_weight=0.0,
                        ctrl_cost_weight=0.1, healthy_reward=1.0, healthy=None, position="qpos_x", obs_exclude=2,
                        qvel_clip=None, obs_fields=("cinert", "cvel", "qfrc_actuator", "cfrc_ext"),
                        reset_noise_scale=1e-2, ctrl_cost_of="ctrl", contact_cost_weight=0.5e-6,
                        contact_cost_max=10.0),
    HumanoidStandupTask("HumanoidStandup-v5", "humanoidstandup.xml", 5, 348, forward_reward_weight=0.0,
                        ctrl_cost_weight=0.1, healthy_reward=1.0, healthy=None, position="qpos_x", obs_exclude=2,
                        qvel_clip=None, obs_fields=("cinert", "cvel", "qfrc_actuator", "cfrc_ext"),
                        obs_fields_from=(1, 1, 6, 1), reset_noise_scale=1e-2, ctrl_cost_of="ctrl",
                        contact_cost_weight=0.5e-6, contact_cost_max=10.0),
    ReacherTask("Reacher-v4", "reacher.xml", 2, 11, forward_reward_weight=0.0, ctrl_cost_weight=1.0,
                healthy_reward=0.0, healthy=None, position="qpos_x", obs_exclude=0, qvel_clip=None,
                max_episode_steps=50),
    ReacherTask("Reacher-v5", "reacher.xml", 2, 10, forward_reward_weight=0.0, ctrl_cost_weight=1.0,
                healthy_reward=0.0, healthy=None, position="qpos_x", obs_exclude=0, qvel_clip=None,
                max_episode_steps=50, vector_obs=2, reward_before_step=False),
    # Pusher-v5 alone: Gymnasium refuses Pusher-v4 with mujoco >= 3
    PusherTask("Pusher-v5", "pusher_v5.xml", 5, 23, forward_reward_weight=0.0, ctrl_cost_weight=0.1, healthy_reward=0.0,
               healthy=None, position="qpos_x", obs_exclude=0, qvel_clip=None, max_episode_steps=100,
               reward_before_step=False),
)}


def model_path(task: LocomotionTask) -> str:
    """The task's model file inside the installed Gymnasium package."""
    try:
        import gymnasium
    except ImportError:
        raise ConfigError(f"env={task.name!r} reads its model from the package gymnasium, which is not "
                          f"installed ({INSTALL_HINT})") from None
    path = os.path.join(os.path.dirname(gymnasium.__file__), "envs", "mujoco", "assets", task.model_file)
    if not os.path.exists(path):
        raise ConfigError(f"env={task.name!r}: its model file {path} is missing from the installed gymnasium "
                          f"({INSTALL_HINT})")
    return path


@functools.lru_cache(maxsize=None)
def model_sha256(name: str) -> str:
    with open(model_path(GYM_TASKS[name]), "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def load_model(task: LocomotionTask):
    """``mujoco.MjModel`` of the task; a one-line ConfigError when it cannot load."""
    import mujoco

    path = model_path(task)
    try:
        return mujoco.MjModel.from_xml_path(path)
    except Exception as e:  # mujoco raises ValueError with the XML parser's message
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"env={task.name!r}: its model {path} does not load: {first}") from None


def model_constants(task: LocomotionTask, model) -> dict:
    """What the definition reads from the model itself (body masses, the torso's index, dt)."""
    import mujoco

    consts = {"dt": float(model.opt.timestep) * task.frame_skip,
              "body_mass": np.asarray(model.body_mass, np.float64).copy()}
    if task.position == "torso_xy":
        consts["torso"] = int(mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, "torso"))
    for body in task.bodies:
        consts[body] = int(mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, body))
    return consts
