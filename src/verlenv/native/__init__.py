"""Native builds: the CUDA toolchain, the recipes and their verified sources, the builder and its cache."""
