"""The host side: grids and plans, devices, the group runner, studies and shards, provenance,
checkpoints, policies on disk, rendering and the command line. It runs ``vaco_jax.core`` and writes
run directories that ``vaco_jax.analysis`` reads."""
