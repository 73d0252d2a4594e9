# git-probe: a pure-Python package the tests commit into a git repository of their own and build from `git archive`.
from setuptools import setup

setup(name="git-probe", version="0.1", py_modules=["git_probe"])
