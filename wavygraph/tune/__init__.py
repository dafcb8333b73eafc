"""Hyperparameter search by validation score (``wavygraph tune``), on Optuna.

The modules: :mod:`.space` (the search-space file, checked against the
config schema), :mod:`.storage` (the study's storage, which trials count,
dead processes' trials), :mod:`.trial` (one trial: config, run, atomic
publish), :mod:`.study` (the trial loop, worker processes, the command's
course), :mod:`.outputs` (``tune.json``, ``trials.csv``, ``best.yaml``,
``final.json``) and :mod:`.cli`.
"""
from .space import Space, SpaceError, load_space, parse_space

__all__ = ["Space", "SpaceError", "load_space", "parse_space"]
