r"""Tables and plots of a sweep folder (``wavygraph report DIR``).

Reads ``DIR/cells/*/cell.json`` (written by :mod:`wavygraph.sweep`) and
writes into ``DIR`` (or ``--out``):

* ``results.csv``: one row per cell: the grid values, ``depth``,
  ``residual``, ``seed``, ``split`` (``data.split``), the scores, and the
  last layer's value of every diagnostic (``<measure>_last``);
* ``summary.md``: test score mean ± std (sample std over seeds and data
  splits: a grid over ``data.split`` repeats runs as seeds do; count in
  brackets) per residual kind (columns) and depth (rows), the best mean of
  each depth in bold; one table per combination of the other grid keys, and
  then all of them in one table (a row per variant, a column per depth);
* ``score_vs_depth.png``: test score against depth per residual kind, mean
  with a ±std band;
* ``diagnostics_depth<D>.png``: every diagnostic against the layer index
  for depth ``D`` (``--depth``, default the largest), one line (mean over
  seeds, ±std band) per residual kind (and values of the other grid keys);
* with ``--best-worst``, ``diagnostics_depth<D>_best_worst.png``: the same
  for only the best and the worst of them at that depth.

The modules: :mod:`.results` (reading the cells, one row per cell, the
aggregates), :mod:`.tables` (markdown), :mod:`.plots` (matplotlib) and
:mod:`.cli` (:func:`make_report` and the command).
"""
from .cli import add_parser, command, make_report
from .plots import DIAGNOSTICS, plot_diagnostics, plot_score_vs_depth
from .results import (
    CELL_FILE, REPEAT_KEYS, SCORE_COLUMNS, ReportError, aggregate, best_and_worst, diagnostics_frame, load_cells,
    load_results, other_keys, variant_label,
)
from .tables import summary_table, variant_table, write_summary

__all__ = [
    "CELL_FILE", "SCORE_COLUMNS", "DIAGNOSTICS", "REPEAT_KEYS", "ReportError", "load_cells", "load_results",
    "other_keys", "aggregate", "summary_table", "variant_table", "write_summary", "plot_score_vs_depth",
    "variant_label", "diagnostics_frame", "best_and_worst", "plot_diagnostics", "make_report", "add_parser",
    "command",
]
