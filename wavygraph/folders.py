"""The names inside a sweep folder that the sweep (:mod:`wavygraph.sweep.store`,
which writes them) and the report (:mod:`wavygraph.report.results`, which reads
them) share: ``OUT/cells/<hash>/`` is one complete cell, and its
:data:`CELL_FILE` is the record of its grid values, config and metrics."""

#: The record of one complete cell, written last into ``OUT/cells/<hash>/``.
CELL_FILE = "cell.json"
