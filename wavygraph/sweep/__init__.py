r"""Depth sweeps: grid expansion, a resumable lock-free result store, parallel
and sharded runs (``wavygraph sweep``).

A sweep file (paths of inputs relative to the sweep file)::

    base: ../cora.yaml            # a train config (optional: the defaults)
    grid:                         # the product of these lists is the set of cells
      model.num_layers: [2, 8, 32, 64]
      model.residual: [diffusion, wave, mix, light_wave]
      train.seed: [0, 1, 2]
    set:                          # fixed overrides for every cell (optional)
      train.epochs: 300
    out_dir: runs/cora_depth      # relative to the working directory

Every cell is one train run (:func:`wavygraph.train.run`) with the config
``base < set < the cell's grid values < command-line key=value``, in

    OUT/cells/<hash>/   config.yaml, metrics.json, model.pt, cell.json

where ``<hash>`` is a stable hash of the cell's resolved config (without the
keys that do not change the result, :data:`wavygraph.keys.NEUTRAL_KEYS`,
options added later among them while at their old behaviour). A cell runs
in ``OUT/tmp/`` and is renamed into ``OUT/cells/`` in one :func:`os.rename`
once complete, so a cell is either complete or absent, whenever the process
is killed. Rerunning the same command skips the cells present; two processes
(shards, machines sharing a folder) never need a lock: shards take disjoint
cells (every n-th in hash order), and if two runs of one cell race, the
first rename wins and the second is dropped.

The modules: :mod:`.spec` (sweep file, grid, hash, shards), :mod:`.store`
(the folder layout, one cell's run and publication, the manifest),
:mod:`.runner` (the cells of a shard, serial or on a worker pool) and
:mod:`.cli` (the command).
"""
from .cli import add_parser, command, main
from .runner import run_sweep
from .spec import (
    SWEEP_KEYS, Cell, Sweep, SweepError, cell_hash, expand, format_override,
    load_sweep, parse_shard, shard_cells,
)
from .store import (
    CELL_FILE, DEFAULT_RUNNER, RUNNER_ENV, cell_dir, clean_stale, is_done, resolve_runner, run_cell,
    write_manifest,
)

__all__ = [
    "Sweep", "Cell", "SweepError", "SWEEP_KEYS", "format_override", "load_sweep",
    "cell_hash", "expand", "parse_shard", "shard_cells", "CELL_FILE", "DEFAULT_RUNNER", "RUNNER_ENV", "cell_dir",
    "is_done", "clean_stale", "resolve_runner", "run_cell", "write_manifest", "run_sweep", "add_parser",
    "command", "main",
]
