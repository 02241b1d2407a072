"""Shared test set-up: a persistent XLA compilation cache and the tiny training configuration.

MJX programs take tens of seconds to compile on a CPU; tests that build the same program share
the compiled executable through JAX's persistent cache (also across pytest-xdist workers).
"""

import os

# Set through the environment (before jax is imported) so subprocesses started by tests share it.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                      os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".jax_cache")))
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "2")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "-1")

# Compile, don't optimise: the suite's programs run for a fraction of a second and take seconds to
# compile, and most of that is LLVM's optimisation of the CPU code. At optimisation level 0 a point_mass
# training program compiles in about half the time (15 s -> 8 s here; tests/test_methods.py 221 s ->
# 87 s with two workers) and runs slower, which only the few tests that run a long program notice: they
# compile with FULL_OPTIMIZATION. Semantics are XLA's either way; comparisons stay within one setting.
FAST_COMPILE = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {FAST_COMPILE}".strip()
FULL_OPTIMIZATION = {"xla_backend_optimization_level": 3, "xla_llvm_disable_expensive_passes": False}

import jax  # noqa: E402
import pytest  # noqa: E402

TINY = dict(env="point_mass", num_envs=8, unroll_length=16, total_env_steps=8 * 16 * 4,
            num_evals=2, eval_episodes=0, episode_length=50, num_epochs=2, num_minibatches=2,
            buffer_capacity=8)


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def study_module(name: str):
    """``vaco_jax.studies.<name>``: the study behind ``experiments/<name>.py``."""
    import importlib

    return importlib.import_module(f"vaco_jax.studies.{name}")


def tiny_config(**overrides):
    from vaco_jax.core.config import Config

    return Config(**{**TINY, **overrides})


@pytest.fixture
def tiny():
    return tiny_config


# `make test-fast` leaves out the tests marked slow: the ones below take 8 s or more each on a 2-core CPU
# (a long compile: MJX, a training program, a script in a subprocess; or a long program), plus any test
# marked @pytest.mark.slow.
SLOW_TESTS = {
    "test_checkpoint.py": {"test_resume_is_bit_for_bit_single_cell", "test_resume_is_bit_for_bit_vmapped_grid"},
    "test_config_files.py": {"test_an_unknown_key_or_a_bad_file_is_one_line_and_exit_2"},
    "test_corrections.py": {"test_each_new_step_knob_is_a_traced_sweep_axis_of_one_program"},
    "test_docs_rebuilt.py": {
        "test_check_names_a_changed_study_figure_and_table",
        "test_committed_docs_are_what_the_committed_results_give",
        "test_the_study_builds_claims_tables_and_figures"
    },
    "test_envs.py": {
        "test_step_keeps_the_state_types_of_reset_so_a_chunk_compiles_once",
        "test_termination_and_truncation_with_auto_reset"
    },
    "test_gym_tasks.py": {
        "test_a_c_engine_run_reports_its_unstable_steps_per_phase",
        "test_mjx_loads_and_steps_the_same_definition",
        "test_training_resumed_from_a_checkpoint_equals_uninterrupted"
    },
    "test_install.py": {"test_pip_install_puts_the_studies_and_commands_in_place_and_runs_the_tiny_preset"},
    "test_single_file_experiments.py": {
        "test_the_lag_sweep_runs_whole_and_writes_a_verified_table_and_a_figure",
        "test_the_step_lag_grid_runs_both_methods_around_their_defaults"
    },
    "test_integrity.py": {
        "test_a_full_disk_is_one_line_leaves_no_temporary_file_and_the_rerun_is_identical",
        "test_a_group_stopped_on_one_device_count_resumes_on_another",
        "test_adding_seeds_later_extends_a_group_and_reruns_nothing",
        "test_damage_to_any_file_is_detected_and_the_numbers_come_out_the_same",
        "test_train_cli_checks_its_output_path_first_and_exits_4_on_divergence",
        "test_train_run_resumes_from_its_checkpoint_bit_for_bit"
    },
    "test_learner_cost.py": {"test_the_update_is_the_same_without_the_pi_t_diagnostic"},
    "test_live.py": {
        "test_a_damaged_or_short_staleness_file_restarts_the_group",
        "test_a_resumed_group_continues_its_staleness_file_and_event_files",
        "test_a_study_with_tensorboard_writes_each_cells_rows_and_histograms"
    },
    "test_locomotion_study.py": {
        "test_the_report_draws_the_study_figures_pooled_and_per_task",
        "test_the_study_end_to_end_on_point_mass"
    },
    "test_methods.py": {
        "test_bfloat16_actors_create_a_measured_mismatch_that_snapshot_recovery_sees",
        "test_decoupled_sources_reduce_to_ppo_clip_without_lag",
        "test_method_trains_at_lag_1_and_8_without_nan",
        "test_r_d_is_measured_against_the_float32_snapshot_for_a_method_that_reads_no_old_logits"
    },
    "test_mismatch_knob.py": {"test_the_actor_samples_from_a_mean_shifted_by_strength_standard_deviations"},
    "test_notebook.py": {"test_notebook_runs_on_a_tiny_sweep"},
    "test_objectives.py": {"test_grad_clip_is_a_checked_setting_and_joint_clipping_changes_training"},
    "test_plots.py": {
        "test_forward_lag_heatmap_and_lines", "test_make_all", "test_plot_script",
        "test_reviewer_figures_one_task_and_make_all"
    },
    "test_readme.py": {"test_every_readme_command_runs_or_at_least_parses"},
    "test_render.py": {"test_render_writes_an_mp4_of_a_trained_groups_policy"},
    "test_registries.py": {
        "test_a_playground_dm_control_task_trains_through_the_adapter",
        "test_a_user_env_trains_and_its_action_bounds_come_from_the_env",
        "test_a_user_network_and_the_activation_option_build_and_train",
        "test_an_env_registered_with_brax_is_reached_by_name",
        "test_cli_runs_keep_apart_and_bad_input_is_one_line_with_exit_code_2",
        "test_help_lists_every_method_env_and_lag_model"
    },
    "test_rollout.py": {"test_lagged_rollout_acts_with_each_envs_own_snapshot"},
    "test_scale.py": {
        "test_a_chunk_then_its_evaluation_program_is_run_chunk",
        "test_a_group_run_in_batches_of_cells_gives_the_same_scores_and_is_its_own_setting",
        "test_a_group_runs_as_parts_of_at_most_max_cells_and_gives_the_same_scores",
        "test_scripts_keep_compiled_programs_unless_the_user_chose_a_cache_or_turned_it_off",
        "test_the_memory_estimate_stays_within_a_factor_of_two_of_xlas_own"
    },
    "test_staleness.py": {
        "test_fixed_lag_gives_age_B_minus_1_after_the_first_phases", "test_synchronous_is_all_age_0",
        "test_uniform_lag_gives_every_age_an_equal_share"
    },
    "test_study.py": {"test_tune_then_run_end_to_end_and_a_frozen_choice_never_changes"},
    "test_sim_vs_real.py": {"test_the_study_end_to_end_on_point_mass"},
    "test_sweep.py": {"test_interrupted_group_resumes_to_the_same_result_and_finished_group_is_skipped"},
    "test_train.py": {"test_B_equal_1_reproduces_synchronous_ppo", "test_ppo_learns_inverted_double_pendulum"},
    "test_user_surrogate.py": {
        "test_a_surrogate_defined_outside_the_package_trains_and_its_knob_is_a_grid_axis",
        "test_a_traced_grid_over_gamma_equals_separate_compiled_runs",
        "test_lag_sweep_script_sweeps_any_field_and_rows_carry_the_values"
    },
}


def pytest_collection_modifyitems(config, items):
    modules = {}
    for item in items:
        name = getattr(item, "originalname", None) or item.name
        file = os.path.basename(str(item.fspath))
        modules.setdefault(file, getattr(item, "module", None))
        if name in SLOW_TESTS.get(file, ()):
            item.add_marker(pytest.mark.slow)
    # a renamed or removed test left in SLOW_TESTS would silently move nothing out of the fast tier
    stale = sorted(f"{file}::{name}" for file, module in modules.items() if module is not None
                   for name in SLOW_TESTS.get(file, ()) if not hasattr(module, name))
    if stale:
        raise pytest.UsageError(f"tests/conftest.py SLOW_TESTS names no test of that file: {', '.join(stale)}")
