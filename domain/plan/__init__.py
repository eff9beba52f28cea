"""A run before it runs: the plan, its YAML, topology, presets, the exact command, the
estimate, quotas, memory fit and the checks that say whether it may be queued."""
