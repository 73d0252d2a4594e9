"""verlenv verify: static checks of an env (also on CPU), GPU kernel checks, a JSON report."""
