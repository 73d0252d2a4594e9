"""Many nodes: verify every node of a Ray cluster with verify's own checks and prove they hold the same env."""
