"""Locking: the pip locks by uv, the thin conda layer, the conda files rendered from them."""
