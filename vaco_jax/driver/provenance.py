"""What a run directory records about how it was made (``run.json``: versions, machine, git commit,
each group's settings), the check that a rerun into it uses the same settings, and the directory locks
(a shared file's read-modify-write; one run per group directory at a time)."""

from __future__ import annotations

from __future__ import annotations
import contextlib
import fcntl
import json
import os
import time
from typing import Sequence
import jax
from vaco_jax.analysis import results
from vaco_jax.core.knobs import ConfigError
from vaco_jax.driver.grid import Group, shard_name


def package_versions() -> dict:
    from importlib import metadata

    names = ["jax", "jaxlib", "flax", "optax", "brax", "mujoco", "mujoco-mjx", "gymnasium", "chex",
             "orbax-checkpoint", "numpy", "scipy", "matplotlib", "tyro"]
    out = {}
    for n in names:
        try:
            out[n] = metadata.version(n)
        except metadata.PackageNotFoundError:
            out[n] = None
    return out


def machine() -> dict:
    """What ran the study (exact numbers differ across CPU types; docs/evaluation.md)."""
    import platform

    cpu = platform.processor() or None
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}


def git_commit() -> str | None:
    import subprocess

    try:
        here = os.path.dirname(os.path.abspath(__file__))
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=here, capture_output=True, text=True,
                               timeout=10).stdout.strip()
        return out.stdout.strip() + ("-dirty" if dirty else "") if out.returncode == 0 else None
    except (OSError, subprocess.SubprocessError):
        return None


def _identity(groups: Sequence[Group]) -> dict:
    """Each group's settings as recorded (``Config.as_record``: the backend resolved, a Gymnasium task's
    model hash)."""
    return json.loads(json.dumps({g.subdir: g.config.as_record() for g in groups}, default=str))


# A setting added to Config after runs were recorded without it: the value that reproduces those runs.
# A record lacking the field is read with this value, so such a run resumes only with that setting
# (and says so) instead of silently continuing under another algorithm.
UNRECORDED_SETTINGS = {"minibatch_shuffle": "sort", "grad_clip": "per_network", "publish_interval": 1}


def _compare_identity(run_dir: str, old: dict, identity: dict) -> None:
    for subdir in sorted(set(old) & set(identity)):
        recorded = {**UNRECORDED_SETTINGS, **old[subdir]}
        diff = [k for k in identity[subdir] if recorded.get(k) != identity[subdir][k]]
        if diff:
            shown = ", ".join(f"{k}: {recorded.get(k)!r} there, {identity[subdir][k]!r} now" for k in diff[:4])
            hint = ("; the policy buffer grows with the largest lag depth, so a lag depth above "
                    f"{recorded.get('buffer_capacity')} needs another --out" if "buffer_capacity" in diff else "")
            raise ConfigError(f"{run_dir} holds group {subdir} with other settings ({shown}){hint}; resume with "
                              "the same settings or choose another --out")


def check_identity(run_dir: str, groups: Sequence[Group], skip: str | None = None) -> None:
    """Read-only: the settings of ``groups`` agree with every record in ``run_dir`` (``run.json`` and
    each shard's ``run.shard-I-of-N.json``, except ``skip``); a group whose settings differ is a
    ConfigError naming them."""
    identity = _identity(groups)
    for path in [os.path.join(run_dir, "run.json")] + shard_records(run_dir):
        if os.path.basename(path) != skip and os.path.exists(path):
            _compare_identity(run_dir, results.read_json(path).get("identity", {}), identity)


def write_run_metadata(run_dir: str, groups: Sequence[Group], info: dict, shard: tuple[int, int] | None = None,
                       extra: dict | None = None) -> None:
    """``run.json``: the run's identity, package versions, git commit, devices.

    The identity is what changes results: each group's static configuration and knob defaults (its
    cells are in its ``cells.json``). Display flags (progress, figures, bootstrap replicates) and the
    directory's location are not part of it, so they never block a resume; a new group (another
    task or method) extends the identity; a group whose settings differ is an error naming them.

    With ``shard=(I, N)`` the record is ``run.shard-I-of-N.json`` instead, written by that shard
    alone (shards running at once never write one file), and checked against every other record.
    ``extra``: more fields of a new record (e.g. a shard's plan).
    """
    identity = _identity(groups)
    name = "run.json" if shard is None else f"run.{shard_name(*shard)}.json"
    os.makedirs(run_dir, exist_ok=True)
    with directory_lock(run_dir):  # processes given other --methods may start at the same moment
        check_identity(run_dir, groups, skip=name)
        meta_path = os.path.join(run_dir, name)
        here = machine()
        if os.path.exists(meta_path):
            meta = results.read_json(meta_path)
            old = meta.get("identity", {})
            _compare_identity(run_dir, old, identity)
            merged = {**old, **identity}
            if merged == old and here in meta.get("machines", []):
                return
            meta["identity"] = merged
        else:
            meta = {"identity": identity, "versions": package_versions(), "git_commit": git_commit(),
                    "devices": [str(d) for d in jax.devices()], "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                    **(extra or {})}
        # every machine that ran part of this directory (a study resumed elsewhere has several)
        meta["machines"] = meta.get("machines", []) + ([here] if here not in meta.get("machines", []) else [])
        meta["command"] = {k: v for k, v in info.items() if k != "out"}  # the latest command (not compared)
        results.write_json(meta_path, meta)


@contextlib.contextmanager
def directory_lock(path: str):
    """An exclusive advisory lock on a directory (``flock`` on the directory itself: no lock file is
    left behind), held for a read-modify-write of a file in it that several processes may share.
    A directory this process holds for its run (:func:`run_lock`) is already its own."""
    if os.path.realpath(path) in _HELD:
        yield
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


_HELD: dict[str, int] = {}  # realpath -> descriptor of each directory this process holds for its run


@contextlib.contextmanager
def run_lock(paths: Sequence[str]):
    """Hold each directory in ``paths`` (created if missing) for the whole of a run: an exclusive
    ``flock`` on the directory itself, taken without waiting, so a second process that would run the same
    group into it at the same time (and both write its checkpoint) fails at once, before it writes
    anything, with a ConfigError naming the holder. Released when the block ends, or by the kernel
    when the process dies: no lock file, nothing stale."""
    taken: list[str] = []
    try:
        for path in sorted({os.path.realpath(p) for p in paths}):
            if path in _HELD:
                continue
            os.makedirs(path, exist_ok=True)
            fd = os.open(path, os.O_RDONLY)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _lock_holder(fd)
                os.close(fd)
                raise ConfigError(f"{path}: another run holds this directory ({holder}); wait for it to finish, "
                                  "or give another --out") from None
            _HELD[path] = fd
            taken.append(path)
        yield
    finally:
        for path in taken:
            os.close(_HELD.pop(path))


def _lock_holder(fd: int) -> str:
    """Who holds the ``flock`` on the directory open as ``fd``: "pid N, running since T" (Linux's
    /proc/locks), else "another process"."""
    st = os.fstat(fd)
    ident = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        with open("/proc/locks", encoding="utf-8") as f:
            pids = [int(parts[4]) for line in f if "->" not in (parts := line.split())
                    and len(parts) > 5 and parts[1] == "FLOCK" and parts[5] == ident]
    except (OSError, ValueError):
        pids = []
    if not pids:
        return "another process"
    pid = pids[0]
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22: start time, clock ticks after boot
        with open("/proc/stat", encoding="utf-8") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(boot + ticks / os.sysconf("SC_CLK_TCK")))
        return f"pid {pid}, running since {started}"
    except (OSError, ValueError, IndexError, StopIteration):
        return f"pid {pid}"


def shard_records(run_dir: str) -> list[str]:
    """The shards' records ``run.shard-I-of-N.json`` in ``run_dir``, sorted."""
    import re

    if not os.path.isdir(run_dir):
        return []
    return sorted(os.path.join(run_dir, f) for f in os.listdir(run_dir)
                  if re.fullmatch(r"run\.shard-\d+-of-\d+\.json", f))
