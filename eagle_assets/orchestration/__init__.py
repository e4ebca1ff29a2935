"""How runs are executed and recovered: partitions, named jobs, the executor that records each run's
worker, dead-run reconciliation, the GPU pool watch and the managed servers' listing."""
