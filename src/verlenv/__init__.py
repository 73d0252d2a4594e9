"""verlenv: reproducible, GPU-verified environments for verl."""

__version__ = "0.1.0"
