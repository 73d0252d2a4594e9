"""GPU kernel check scripts, each run by path with the python of the environment under test."""
