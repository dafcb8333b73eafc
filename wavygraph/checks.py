"""Checks shared by the layers (:mod:`wavygraph.nn.validate`), the data sets
(:mod:`wavygraph.data.validate`, :mod:`wavygraph.data.user_graph`), the
training loop and the command line (:class:`OneLineParser`).

Each helper answers one question; the caller words the message, so that
every error keeps naming its own argument and fix:

    >>> is_int(torch.tensor([[0, 1], [1, 2]]))
    True
    >>> out_of_range(torch.tensor([0, 3, 5]), 4)   # node 5 of 4 nodes: (min, max)
    (0, 5)
    >>> check_positive_int("heads", 0)
    Traceback (most recent call last):
    ValueError: heads must be a positive integer, got 0
"""
from __future__ import annotations

import argparse
from typing import Callable, Optional

import torch
from torch import Tensor


def is_int(t: Tensor) -> bool:
    """Whether ``t`` holds integers (any integer dtype; not ``bool``, floating
    or complex)."""
    return not (t.dtype.is_floating_point or t.is_complex() or t.dtype == torch.bool)


def out_of_range(t: Tensor, stop: Optional[int] = None) -> Optional[tuple[int, int]]:
    """``(min, max)`` of ``t`` as Python ints when an entry lies outside
    ``[0, stop)`` (``stop=None``: only negative entries count), else
    :obj:`None` (also for an empty ``t``). Node indices (``stop`` the number
    of nodes) and class labels (``stop`` the number of classes) are checked
    with it; a caller names the offending entry as ``lo if lo < 0 else hi``."""
    if not t.numel():
        return None
    lo, hi = int(t.min()), int(t.max())
    if lo < 0 or (stop is not None and hi >= stop):
        return lo, hi
    return None


def check_positive_int(name: str, value, error: type[Exception] = ValueError, allow_zero: bool = False) -> None:
    """``value`` must be an ``int`` (not a ``bool``) ``>= 1`` (``>= 0`` with
    ``allow_zero``); otherwise ``error("<name> must be a positive integer,
    got <value>")`` (``non-negative`` with ``allow_zero``) is raised."""
    if isinstance(value, bool) or not isinstance(value, int) or value < (0 if allow_zero else 1):
        raise error(f"{name} must be a {'non-negative' if allow_zero else 'positive'} integer, got {value!r}")


class OneLineParser(argparse.ArgumentParser):
    """An :class:`argparse.ArgumentParser` whose usage errors are one line,
    ``wavygraph: error: <command>: <message>; see <command> --help``, exit
    code 2, like every other error of the command line (argparse prints the
    usage block first). Sub-parsers made by ``add_subparsers`` inherit it."""

    def error(self, message: str):
        command = self.prog.split(" ", 1)[1] + ": " if " " in self.prog else ""
        self.exit(2, f"wavygraph: error: {command}{message}; see {self.prog} --help\n")


def split_options(args: argparse.Namespace, prog: str,
                  add_options: Callable[..., None]) -> argparse.Namespace:
    """``args`` with the options that came after the positional file parsed
    (argparse leaves them in ``args.overrides`` with the ``key=value`` items,
    :data:`argparse.REMAINDER`): ``add_options(parser, defaults=False)``
    declares them, and a bad one is a one-line :class:`OneLineParser` error."""
    inner = OneLineParser(prog=prog, add_help=False)
    inner.add_argument("overrides", nargs="*")
    add_options(inner, defaults=False)
    rest = inner.parse_intermixed_args(list(args.overrides or []))
    merged = vars(args).copy()
    merged.update(vars(rest))
    return argparse.Namespace(**merged)
