"""``train.cpu_heap``: when glibc's mmap threshold is fixed (train.env.fix_cpu_heap)."""
import ctypes
import sys
from pathlib import Path

import pytest

from wavygraph.config import ConfigError, load_config
from wavygraph.train import env, run_state

LINUX = sys.platform.startswith("linux")
CSBM = str(Path(__file__).resolve().parents[2] / "configs" / "csbm.yaml")


class FakeLibc:
    def __init__(self):
        self.calls = []

    def mallopt(self, param, value):
        self.calls.append((param, value))
        return 1


@pytest.fixture
def libc(monkeypatch):
    fake = FakeLibc()
    monkeypatch.setattr(env.ctypes, "CDLL", lambda name: fake)
    monkeypatch.setattr(env.sys, "platform", "linux")
    return fake


@pytest.mark.parametrize("mode, memory_mode, fixed", [
    ("auto", True, True), ("auto", False, False), ("mmap", False, True), ("mmap", True, True),
    ("default", True, False), ("default", False, False),
])
def test_when_the_threshold_is_fixed(libc, mode, memory_mode, fixed):
    assert env.fix_cpu_heap(mode, memory_mode) is fixed
    # M_MMAP_THRESHOLD is -3 in glibc's malloc.h; 1 MiB
    assert libc.calls == ([(-3, 1 << 20)] if fixed else [])


def test_not_off_linux_nor_without_mallopt(monkeypatch):
    monkeypatch.setattr(env.sys, "platform", "darwin")
    assert env.fix_cpu_heap("mmap", True) is False
    monkeypatch.setattr(env.sys, "platform", "linux")
    monkeypatch.setattr(env.ctypes, "CDLL", lambda name: object())  # a libc without mallopt (not glibc)
    assert env.fix_cpu_heap("mmap", True) is False


@pytest.mark.skipif(not LINUX, reason="glibc's mallopt")
def test_glibc_takes_it():
    try:
        ctypes.CDLL(None).mallopt
    except AttributeError:
        pytest.skip("no mallopt (not glibc)")
    assert env.fix_cpu_heap("mmap", False) is True


@pytest.mark.parametrize("overrides, fixed", [
    (["model.residual=leapfrog", "model.reversible=true"], True),
    (["model.gradient_checkpointing=true"], True),
    ([], False),
    (["model.residual=leapfrog", "model.reversible=true", "train.cpu_heap=default"], False),
    (["train.cpu_heap=mmap"], True),
])
def test_a_run_fixes_it_for_the_memory_modes_on_cpu(libc, overrides, fixed):
    cfg = load_config(CSBM, ["train.device=cpu", *overrides])
    run_state.prepare_process(cfg)
    assert bool(libc.calls) is fixed


def test_bad_value_is_one_line():
    with pytest.raises(ConfigError, match=r"train.cpu_heap.*auto.*mmap.*default") as info:
        load_config(CSBM, ["train.cpu_heap=jemalloc"])
    assert "\n" not in str(info.value)
