"""The catalog: stacks.toml and the data tables (packages, families, backends, GPUs, pins)."""
