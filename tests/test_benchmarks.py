"""The benchmarks' timing helpers: call order and ratio arithmetic (no
timing is asserted)."""
import pytest

from benchmarks._common import paired_ratios, time_reps


def test_time_reps_reverses_the_order_every_repetition():
    calls = []
    fns = {name: (lambda name=name: calls.append(name)) for name in "abc"}
    times = time_reps(fns, reps=4, device="cpu", warmup=1)
    assert calls == list("abc" + "abc" + "cba" + "abc" + "cba")  # warm-up, then a b c / c b a
    assert {k: len(v) for k, v in times.items()} == {"a": 4, "b": 4, "c": 4}
    assert all(t >= 0 for ts in times.values() for t in ts)


def test_paired_ratios_are_the_median_of_per_repetition_ratios():
    # the load doubles in repetition 2; the ratio of the medians would be 1.2 / 1.0
    times = {"base": [1.0, 2.0, 1.0], "x": [1.1, 2.2, 1.2]}
    r = paired_ratios(times, "base")
    assert r["base"] == 1.0
    assert r["x"] == pytest.approx(1.1)  # median of 1.1, 1.1, 1.2


def test_reversible_error_takes_model_options(capsys):
    """``--set`` reaches the model (its options are printed) and the errors are rounding-sized."""
    from benchmarks import reversible_error

    reversible_error.main(["--layers", "3", "--num-nodes", "200", "--hidden", "8",
                           "--set", "tau=0.5", "ffn=true", "norm=batch", "local=sep", "shared_attention=false"])
    out = capsys.readouterr().out.splitlines()
    assert "'tau': 0.5" in out[0] and "'ffn': True" in out[0] and "'local': 'sep'" in out[0]
    f32, f64 = (float(w.rstrip(",")) for w in out[1].split() if "e-" in w)
    assert 0 <= f32 < 1e-4 and 0 <= f64 < 1e-12
    with pytest.raises(SystemExit):
        reversible_error.main(["--set", "ffn"])
