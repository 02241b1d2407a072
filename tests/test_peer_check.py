"""The peer check's reading of CleanRL's own logs: the same score rule as ours (episodes that end in
the last 5% of the env steps), and bad input refused in one line."""

import pytest

from benchmarks.peer_check import Args, cleanrl_log_score, cleanrl_record
from vaco_jax.analysis.peer import summary
from vaco_jax.core.config import ConfigError


def _log(tmp_path, name, episodes):
    path = tmp_path / name
    lines = ["noise line", "SPS: 400"]
    lines += [f"global_step={step}, episodic_return=[{ret}]" for step, ret in episodes]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_only_the_episodes_ending_in_the_last_five_percent_count(tmp_path):
    log = _log(tmp_path, "s1.log", [(100, -5.0), (949_000, 10.0), (950_000, 20.0), (950_001, 30.0), (999_000, 50.0)])
    assert cleanrl_log_score(log, 1_000_000) == (40.0, 2)  # 950,000 itself is not after 95%
    assert cleanrl_log_score(_log(tmp_path, "early.log", [(10, 1.0)]), 1_000_000)[1] == 0


def test_a_record_of_several_seeds_reads_like_ours(tmp_path):
    logs = [_log(tmp_path, f"s{i}.log", [(990_000, 1400.0 + 10 * i)]) for i in range(3)]
    record = cleanrl_record(Args(tasks=("HalfCheetah-v4",), cleanrl_logs=tuple(logs), label="mujoco-3.17.0"))
    row = summary(record)
    assert row["settings"] == "cleanrl_code_mujoco-3.17.0" and row["seeds"] == [1400.0, 1410.0, 1420.0]
    assert row["inside"] is True  # CleanRL's published 1442.64 +- 2 x 46.03
    assert row["trainer"] == "CleanRL's script"
    ours = summary({"task": "HalfCheetah-v4", "settings": "cleanrl", "scores": [1500.0, None], "diverged": [0, 1]})
    assert ours["trainer"] == "vaco_jax" and ours["n_diverged"] == 1


def test_bad_logs_and_labels_are_one_line(tmp_path):
    empty = tmp_path / "empty.log"
    empty.write_text("SPS: 1\n")
    with pytest.raises(ConfigError, match="holds no"):
        cleanrl_log_score(str(empty), 1_000_000)
    log = _log(tmp_path, "s.log", [(990_000, 1.0)])
    with pytest.raises(ConfigError, match="one task"):
        cleanrl_record(Args(tasks=("Hopper-v4", "HalfCheetah-v4"), cleanrl_logs=(log,), label="x"))
    with pytest.raises(ConfigError, match="label"):
        cleanrl_record(Args(tasks=("Hopper-v4",), cleanrl_logs=(log,), label="a b/c"))


def test_a_task_without_a_cleanrl_figure_is_checked_against_the_named_publication():
    from vaco_jax.analysis.peer import published

    row = summary({"task": "Ant-v4", "settings": "cleanrl", "scores": [1200.0, 1000.0], "diverged": [0, 0]})
    assert row["cleanrl"] == (3258.4, 1079.3) and row["source"].startswith("Tianshou")
    assert row["inside"] is True  # 1,100 is inside 3,258.4 +- 2 x 1,079.3 (1,099.8 ... 5,417.0)
    assert summary({"task": "Ant-v4", "settings": "cleanrl", "scores": [900.0, 1000.0], "diverged": [0, 0]})["inside"] is False
    assert published("Hopper-v4")[2].startswith("CleanRL") and published("Swimmer-v4") is None
    assert summary({"task": "Swimmer-v4", "settings": "cleanrl", "scores": [1.0, 2.0], "diverged": [0, 0]})["inside"] is None


def test_the_table_names_a_publication_that_is_not_cleanrls(tmp_path):
    from vaco_jax.analysis import results
    from vaco_jax.analysis.peer import table

    results.write_json(str(tmp_path / "Ant-v4_cleanrl.json"),
                       {"task": "Ant-v4", "settings": "cleanrl", "scores": [1200.0, 1000.0], "diverged": [0, 0]})
    results.write_json(str(tmp_path / "Hopper-v4_cleanrl.json"),
                       {"task": "Hopper-v4", "settings": "cleanrl", "scores": [2300.0, 2400.0], "diverged": [0, 0]})
    text = table(str(tmp_path))
    assert "3258.40 ± 1079.30 (Tianshou's PPO, Ant-v3" in text and "| 2382.86 ± 271.74 | yes |" in text
