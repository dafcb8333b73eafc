"""wavygraph.data.lock: one lock per data set folder, held by real processes.

The holders are plain Python processes that load ``lock.py`` by its path
(filelock and tqdm only, no torch), so these tests start in a fraction of a
second. No test depends on timing: a waiting process is observed through the
lines it logs, a holder is told to release through its standard input, and a
deadline only turns a hang into a failure.
"""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from filelock import FileLock, Timeout

from wavygraph.data import lock as lk
from wavygraph.data.lock import dataset_lock, lock_path

LOCK_PY = Path(lk.__file__)
DEADLINE = 120.0  # seconds before a hang counts as a failure


def _holder(folder, fail: bool = False) -> subprocess.Popen:
    """A process that takes ``dataset_lock(folder)``, prints ``held``, waits for a
    line on its standard input, then leaves the block (raising when ``fail``)."""
    code = textwrap.dedent(f"""
        import importlib.util, sys
        spec = importlib.util.spec_from_file_location("lock", {str(LOCK_PY)!r})
        lock = importlib.util.module_from_spec(spec); spec.loader.exec_module(lock)
        try:
            with lock.dataset_lock({str(folder)!r}):
                print("held", flush=True)
                sys.stdin.readline()
                if {fail!r}:
                    raise RuntimeError("preparation failed")
        except RuntimeError:
            sys.exit(3)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def _is_held(folder) -> bool:
    try:
        FileLock(lock_path(folder)).acquire(timeout=0).lock.release()
        return False
    except Timeout:
        return True


def _guarded_log(lines: list):
    """A log that records the lines and fails the wait (instead of hanging) past the deadline."""
    start = time.monotonic()

    def log(line: str) -> None:
        lines.append(line)
        if time.monotonic() - start > DEADLINE:
            raise AssertionError(f"still waiting after {DEADLINE} s: {lines[-1]}")

    return log


def _wait_for(predicate, what: str) -> None:
    start = time.monotonic()
    while not predicate():
        assert time.monotonic() - start < DEADLINE, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_lock_path_is_next_to_the_folder_and_case_blind(tmp_path):
    assert lock_path(tmp_path / "Cora") == str(tmp_path / ".cora.lock")
    assert lock_path(str(tmp_path / "cora") + os.sep) == lock_path(tmp_path / "CORA")
    assert lock_path(tmp_path / "ogbn_arxiv") == str(tmp_path / ".ogbn_arxiv.lock")


def test_lock_file_left_behind_does_not_block(tmp_path):
    folder = tmp_path / "Cora"
    Path(lock_path(folder)).write_text("")  # what a killed run leaves
    lines: list = []
    with dataset_lock(folder, log=_guarded_log(lines)) as path:
        assert path == lock_path(folder) and _is_held(folder)
    assert lines == [] and not _is_held(folder)
    assert os.path.exists(lock_path(folder))  # a successful block keeps the file for the next run


def test_holder_killed_releases_the_lock(tmp_path):
    folder = tmp_path / "Cora"
    proc = _holder(folder)
    assert _is_held(folder)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    lines: list = []
    with dataset_lock(folder, log=_guarded_log(lines)):
        pass  # entered: the operating system released the dead process's lock
    assert os.path.exists(lock_path(folder))


def _wait_in_thread(folder, lines: list, entered: list, report_every: float) -> threading.Thread:
    def wait() -> None:
        with dataset_lock(folder, log=_guarded_log(lines), report_every=report_every):
            entered.append(True)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    return thread


def test_waiting_says_so_then_enters_when_the_holder_is_done(tmp_path):
    folder = tmp_path / "Cora"
    proc = _holder(folder)
    lines, entered = [], []
    thread = _wait_in_thread(folder, lines, entered, report_every=0.05)
    _wait_for(lambda: len(lines) >= 3, "the waiting lines")  # the first line, then "still waiting" ones
    assert not entered
    assert lines[0].startswith(f"wavygraph: waiting for {lock_path(folder)}") and str(folder) in lines[0]
    assert all("still waiting" in line and " s;" in line for line in lines[1:3])
    assert all("\n" not in line for line in lines)
    proc.communicate("go\n", timeout=DEADLINE)
    thread.join(DEADLINE)
    assert entered == [True] and proc.returncode == 0


def test_failed_block_removes_its_lock_file_and_the_root_it_created(tmp_path):
    root = tmp_path / "fresh"
    with pytest.raises(RuntimeError):
        with dataset_lock(root / "Cora"):
            assert os.path.exists(lock_path(root / "Cora"))
            raise RuntimeError("download failed")
    assert not root.exists()
    (tmp_path / "keep").write_text("x")
    with pytest.raises(KeyboardInterrupt):
        with dataset_lock(tmp_path / "Cora"):
            raise KeyboardInterrupt
    assert sorted(os.listdir(tmp_path)) == ["keep"]


def test_a_waiter_takes_over_from_a_holder_that_failed(tmp_path):
    """The holder fails and removes the lock file (and the root) while the waiter
    waits: the waiter re-creates them and enters; nothing else holds it then."""
    root = tmp_path / "fresh"
    proc = _holder(root / "Cora", fail=True)
    lines, entered = [], []
    thread = _wait_in_thread(root / "Cora", lines, entered, report_every=0.05)
    _wait_for(lambda: lines, "the waiting line")
    proc.communicate("fail\n", timeout=DEADLINE)
    assert proc.returncode == 3
    thread.join(DEADLINE)
    assert entered == [True]
    assert os.path.exists(lock_path(root / "Cora"))


_WORKER = """
import importlib.util, os, sys, time
spec = importlib.util.spec_from_file_location("lock", sys.argv[1])
lock = importlib.util.module_from_spec(spec); spec.loader.exec_module(lock)
folder, rounds = sys.argv[2], int(sys.argv[3])
counter, inside = os.path.join(os.path.dirname(folder), "counter"), folder + ".inside"
for i in range(rounds):
    try:
        with lock.dataset_lock(folder, log=lambda line: None, report_every=1.0):
            fd = os.open(inside, os.O_CREAT | os.O_EXCL)  # fails if another process is inside
            n = int(open(counter).read()) if os.path.exists(counter) else 0
            time.sleep(0.002)
            with open(counter, "w") as f:
                f.write(str(n + 1))
            os.close(fd); os.remove(inside)
            if i % 3 == 2:
                raise RuntimeError("fail: the lock file is removed while others wait")
    except RuntimeError:
        pass
"""


def test_processes_exclude_each_other_even_when_holders_fail(tmp_path):
    """Four processes increment one counter under the lock (read, pause, write),
    one round in three failing inside the block: no update is lost."""
    root = tmp_path / "data"
    rounds, procs = 15, 4
    workers = [subprocess.Popen([sys.executable, "-c", _WORKER, str(LOCK_PY), str(root / "Cora"), str(rounds)],
                                stderr=subprocess.PIPE, text=True) for _ in range(procs)]
    errors = [w.communicate(timeout=DEADLINE)[1] for w in workers]
    assert [w.returncode for w in workers] == [0] * procs, errors
    assert (root / "counter").read_text() == str(rounds * procs)
