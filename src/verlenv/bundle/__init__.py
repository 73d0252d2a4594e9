"""Offline bundles: every file a locked variant needs, hash-checked, carried to machines without an index.

`parts` and `bootstrap` use the standard library only: they run on a node that has nothing but Python.
"""
