"""Running a sweep: the missing cells of one shard, one after the other or
on a pool of worker processes (one device each), then a summary."""
from __future__ import annotations

import os
import sys
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from typing import Callable, Sequence

from wavygraph.utils import worker_device, worker_threads

from .spec import Cell, Sweep, SweepError, expand, shard_cells
from .store import RUNNER_ENV, cell_dir, clean_stale, is_done, read_cell, read_manifest, run_cell, write_manifest

_WORKER_DEVICE: str | None = None


def _exit_with_parent(parent: int) -> None:
    # a worker whose sweep process was killed (kill -9) stops instead of
    # lingering; its unfinished cell stays in tmp/ and is cleaned on the rerun
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)


def _init_worker(queue, threads: int | None) -> None:
    global _WORKER_DEVICE
    import threading

    from wavygraph.utils import ignore_import_warnings

    ignore_import_warnings()  # a worker imports PyG afresh
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    _WORKER_DEVICE = queue.get()
    if threads:
        import torch

        torch.set_num_threads(threads)


def _run_in_worker(cell: Cell, out_dir: str) -> dict:
    return run_cell(cell, out_dir, _WORKER_DEVICE)


def _run_pool(todo: Sequence[Cell], out_dir: str, jobs: int, devices: Sequence[str],
              record: Callable[[dict, Cell], None]) -> None:
    """``jobs`` spawned workers; worker ``i`` runs on ``devices[i % len]``."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    for i in range(jobs):
        queue.put(worker_device(devices, i))
    threads = worker_threads(devices, jobs)
    with ProcessPoolExecutor(max_workers=min(jobs, len(todo)), mp_context=ctx,
                             initializer=_init_worker, initargs=(queue, threads)) as pool:
        pending = {pool.submit(_run_in_worker, c, out_dir): c for c in todo}
        while pending:
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for fut in finished:
                cell = pending.pop(fut)
                try:
                    res = fut.result()
                except Exception as exc:  # a worker died
                    res = {"hash": cell.hash, "status": "failed", "seconds": 0.0,
                           "error": f"{type(exc).__name__}: {exc}"}
                record(res, cell)


def _run_cells(todo: Sequence[Cell], out_dir: str, jobs: int, devices: Sequence[str],
               record: Callable[[dict, Cell], None], bar) -> None:
    try:
        if jobs == 1 or len(todo) <= 1:
            for cell in todo:
                record(run_cell(cell, out_dir, worker_device(devices, 0)), cell)
        else:
            _run_pool(todo, out_dir, jobs, devices, record)
    finally:
        bar.close()


def _log_summary(sweep: Sweep, cells: Sequence[Cell], counts: dict, failures: Sequence[str],
                 shard_index: int, shard_count: int, log: Callable[[str], None]) -> None:
    out_dir = os.path.abspath(sweep.out_dir)
    part = f" (shard {shard_index}/{shard_count}: {counts['shard']} cells)" if shard_count > 1 else ""
    log(
        f"sweep {sweep.out_dir}: {len(cells)} cells{part}; ran {counts['done']}, "
        f"already done {counts['skipped']}, failed {counts['failed']}"
        + (f", finished elsewhere {counts['duplicate']}" if counts["duplicate"] else "")
        + f"; {counts['seconds']:.1f}s"
    )
    for line in failures:
        log(f"  failed: {line} (traceback in {os.path.join(sweep.out_dir, 'failed')})")
    present = sum(is_done(out_dir, c.hash) for c in cells)
    log(f"{present}/{len(cells)} cells of the grid present in {sweep.out_dir}")
    if present:
        try:
            from wavygraph.report import load_results, summary_table

            log(summary_table(load_results(out_dir)))
        except Exception as exc:  # the summary is a courtesy; the results are on disk
            log(f"(no summary: {type(exc).__name__}: {exc})")
    log(f"report: wavygraph report {sweep.out_dir}")


def _distinct(values: Sequence) -> list:
    """``values`` without repeats (plain containers compared by their JSON), in order."""
    import json

    seen: dict[str, object] = {}
    for v in values:
        seen.setdefault(json.dumps(v, sort_keys=True, default=str), v)
    return list(seen.values())


def check_before_writing(out_dir: str, mine: Sequence[Cell], todo: Sequence[Cell],
                         devices: Sequence[str]) -> None:
    """What would make every cell fail, checked once before the sweep writes
    anything (a :class:`ValueError` with one line): a corrupted ``sweep.json``
    or ``cell.json`` of a finished cell, a device that does not exist, and,
    for the default trainer, data that do not load or are malformed (each
    distinct ``data`` config of the cells still to run is loaded once)."""
    from omegaconf import OmegaConf

    read_manifest(out_dir)
    for c in mine:
        if is_done(out_dir, c.hash):
            read_cell(cell_dir(out_dir, c.hash) / "cell.json")
    if not todo or os.environ.get(RUNNER_ENV):  # a custom trainer reads its own data and devices
        return
    from wavygraph.train.env import resolve_device
    from wavygraph.train.run_state import load_data

    for name in devices or _distinct(c.config["train"]["device"] for c in todo):
        try:
            resolve_device(name)
        except ValueError as exc:
            raise SweepError(f"--devices: {exc}" if devices else str(exc)) from None
    for data in _distinct(c.config["data"] for c in todo):
        load_data(OmegaConf.create(data))


def run_sweep(
    sweep: Sweep,
    shard_index: int = 0,
    shard_count: int = 1,
    jobs: int = 1,
    devices: Sequence[str] | None = None,
    progress: bool = True,
    log: Callable[[str], None] = print,
    on_checked: Callable[[], object] | None = None,
) -> dict:
    """Run every missing cell of this shard; returns counts
    ``{"cells", "shard", "done", "skipped", "duplicate", "failed", "seconds"}``.
    Nothing is written before :func:`check_before_writing` passes;
    ``on_checked`` is called then, before the first file (the demo writes its
    sweep file there)."""
    if jobs < 1:
        raise SweepError(f"--jobs must be >= 1, got {jobs}")
    devices = [d for d in (devices or []) if d]
    start = time.time()
    out_dir = os.path.abspath(sweep.out_dir)
    cells = expand(sweep)
    mine = shard_cells(cells, shard_index, shard_count)
    todo = [c for c in mine if not is_done(out_dir, c.hash)]
    check_before_writing(out_dir, mine, todo, devices)
    if on_checked is not None:
        on_checked()
    write_manifest(sweep, cells, out_dir)
    clean_stale(out_dir, [c.hash for c in mine])
    todo = [c for c in todo if not is_done(out_dir, c.hash)]
    counts = {"cells": len(cells), "shard": len(mine), "done": 0, "skipped": len(mine) - len(todo),
              "duplicate": 0, "failed": 0}
    failures: list[str] = []

    from tqdm.auto import tqdm

    bar = tqdm(total=len(mine), initial=counts["skipped"], desc="cells", unit="cell",
               disable=not progress, file=sys.stderr, dynamic_ncols=True)

    def record(res: dict, cell: Cell) -> None:
        counts[res["status"]] = counts.get(res["status"], 0) + 1
        if res["status"] == "failed":
            failures.append(f"{cell.hash} {cell.params}: {res['error']}")
        bar.set_postfix_str(" ".join(f"{k.split('.')[-1]}={v}" for k, v in cell.params.items()), refresh=False)
        bar.update(1)

    _run_cells(todo, out_dir, jobs, devices, record, bar)
    counts["seconds"] = time.time() - start
    _log_summary(sweep, cells, counts, failures, shard_index, shard_count, log)
    return counts
