"""Built from a git archive carried in a bundle."""

VALUE = 1
