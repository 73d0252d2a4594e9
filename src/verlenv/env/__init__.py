"""The env: a locked variant installed exactly, its files against their RECORD, its runtime defaults."""
