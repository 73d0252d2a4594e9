"""Programs run by path with the python of the environment under test (standard library only, never verlenv:
that env may not have it); each parses its own arguments and prints one JSON answer."""
