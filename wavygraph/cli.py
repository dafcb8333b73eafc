"""The ``wavygraph`` command: ``wavygraph train | sweep | tune | report | demo``.

Every module listed in :data:`SUBCOMMANDS` provides ``add_parser(subparsers)``
that adds its subcommand and sets ``func(args) -> int``. Errors of our own
checks (:class:`ConfigError`,
:class:`WavygraphDataError`, ``ValueError``) print ``wavygraph: error: <one
line>`` on stderr and exit with code 2, without a traceback. The
``FutureWarning`` that PyTorch Geometric's import raises on torch >= 2.14
(``torch.jit.script`` is deprecated) is hidden while the command runs.
"""
from __future__ import annotations

import argparse
import importlib
import sys
import warnings

SUBCOMMANDS = ["wavygraph.train.cli", "wavygraph.sweep.cli", "wavygraph.tune.cli", "wavygraph.report", "wavygraph.demo"]


def build_parser() -> argparse.ArgumentParser:
    from wavygraph import __version__
    from wavygraph.checks import OneLineParser

    parser = OneLineParser(prog="wavygraph", description="Deep graph transformers that do not over-smooth.")
    parser.add_argument("--version", action="version", version=f"wavygraph {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in SUBCOMMANDS:
        importlib.import_module(name).add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    from wavygraph.utils import ignore_import_warnings

    with warnings.catch_warnings():
        ignore_import_warnings()
        return _main(argv)


def _main(argv: list[str] | None) -> int:
    from wavygraph.config import ConfigError
    from wavygraph.data.errors import WavygraphDataError
    from wavygraph.nn.steppers.compiled import StepCompileError
    from wavygraph.utils import one_line

    parser = build_parser()
    args = parser.parse_args(argv)
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(func(args) or 0)
    except (ConfigError, WavygraphDataError, ValueError, StepCompileError) as exc:
        print(f"wavygraph: error: {one_line(exc, join=True)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("wavygraph: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of stdout has gone (e.g. `| head`): stop quietly, as a filter does
        import contextlib
        import os

        with contextlib.suppress(OSError, ValueError):  # Python's flush at exit would raise again
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
