"""wavygraph tune in this process (tiny studies on the synthetic ``csbm``
graph, preset ``small``, 2 layers, a few epochs, one thread): trials.csv,
best.yaml reproducing its trial, the final seeds, pruning, a baseline space,
a repeatable one-process study, the report of a tune folder, and the
settling of trials whose process died."""
import csv
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
import yaml

from wavygraph.cli import main
from wavygraph.tune import storage as st

ROOT = Path(__file__).resolve().parents[2]
CSBM = str(ROOT / "configs" / "csbm.yaml")
SMALL = ["data.csbm.preset=small", "model.num_layers=2", "train.num_threads=1"]
SPACE = {
    "train.lr": {"type": "float", "low": 1e-3, "high": 3e-2, "log": True},
    "model.dropout": {"type": "float", "low": 0.0, "high": 0.6},
    "model.residual": {"type": "categorical", "choices": ["diffusion", "light_wave"]},
}


def write_space(folder: Path, space=None) -> str:
    path = folder / "space.yaml"
    path.write_text(yaml.safe_dump(space or SPACE, sort_keys=False))
    return str(path)


def read_rows(out: Path) -> list[dict]:
    with open(out / "trials.csv") as fh:
        return list(csv.DictReader(fh))


def tune(capsys, out: Path, *args, space=None, epochs=6) -> dict:
    rc = main(["tune", CSBM, "--space", write_space(out.parent, space), *SMALL, f"train.epochs={epochs}",
               f"out_dir={out}", "--no-progress", *args])
    lines = capsys.readouterr().out.strip().splitlines()
    summary = json.loads(next(line for line in lines if line.startswith("{")))
    summary["rc"] = rc
    return summary


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """One 4-trial study with --final-seeds 0,1,2 (run once for the tests below)."""
    import io
    from contextlib import redirect_stdout

    out = tmp_path_factory.mktemp("tune") / "study"
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = main(["tune", CSBM, "--space", write_space(out.parent), *SMALL, "train.epochs=4", f"out_dir={out}",
                   "--no-progress", "--trials", "4", "--final-seeds", "0,1,2"])
    assert rc == 0
    summary = json.loads(next(line for line in buf.getvalue().splitlines() if line.startswith("{")))
    return out, summary


def test_trials_csv_and_the_best_trial(study):
    out, summary = study
    rows = read_rows(out)
    assert [int(r["number"]) for r in rows] == list(range(4))
    assert list(rows[0])[:4] == ["number", "train.lr", "model.dropout", "model.residual"]
    counted = [r for r in rows if r["state"] in ("COMPLETE", "PRUNED")]
    assert len(counted) == 4 and summary["complete"] + summary["pruned"] == 4
    for r in rows:  # validation and test of every trial, from its published folder
        record = json.loads((out / "trials" / r["number"] / "trial.json").read_text())
        assert float(r["val"]) == record["val"] and float(r["test"]) == record["test"]
        assert record["state"] == r["state"]
        if r["state"] == "COMPLETE":
            assert json.loads((out / "trials" / r["number"] / "metrics.json").read_text())["best_val"] == record["val"]
    done = sorted((r for r in rows if r["state"] == "COMPLETE"), key=lambda r: (-float(r["val"]), int(r["number"])))
    final = json.loads((out / "final.json").read_text())
    # the candidates: the three trials of the highest validation scores, best first; the study's
    # best trial is the one of them with the highest mean validation over the final seeds
    assert [c["trial"] for c in final["candidates"]] == [int(r["number"]) for r in done[:3]]
    assert [c["trial_val"] for c in final["candidates"]] == [float(r["val"]) for r in done[:3]]
    means = [statistics.fmean(c["val"]) for c in final["candidates"]]
    pick = final["candidates"][means.index(max(means))]
    assert summary["best_trial"] == final["trial"] == pick["trial"] == summary["final_trial"]
    best = next(r for r in rows if int(r["number"]) == pick["trial"])
    assert summary["best_val"] == float(best["val"]) and summary["best_test"] == float(best["test"])
    assert f"the best trial ({pick['trial']})" in (out / "best.yaml").read_text()
    assert not (out / "tmp").exists()


def test_best_yaml_reproduces_the_best_trial(study, capsys):
    out, summary = study
    cfg = yaml.safe_load((out / "best.yaml").read_text())
    assert cfg["out_dir"] == os.path.join(str(out), "best") and cfg["train"]["num_threads"] == 1
    assert main(["train", str(out / "best.yaml")]) == 0
    printed = json.loads(next(line for line in capsys.readouterr().out.splitlines() if line.startswith("{")))
    assert printed["best_val"] == summary["best_val"]  # exactly: same device and threads
    assert printed["test"] == summary["best_test"]


def test_final_seeds(study):
    out, summary = study
    final = json.loads((out / "final.json").read_text())
    assert final["seeds"] == [0, 1, 2] and len(final["test"]) == len(final["val"]) == 3
    assert final["test_mean"] == pytest.approx(statistics.fmean(final["test"]))
    assert final["test_std"] == pytest.approx(statistics.stdev(final["test"]))
    assert summary["final_test_mean"] == final["test_mean"] and summary["final_test_std"] == final["test_std"]
    best_seed = yaml.safe_load((out / "best.yaml").read_text())["train"]["seed"]
    if best_seed in final["seeds"]:  # the best trial's own seed gives the best trial's scores again
        assert final["val"][final["seeds"].index(best_seed)] == summary["best_val"]
    for c in final["candidates"]:  # every candidate's runs, each from its own folder
        for seed, val, test in zip((0, 1, 2), c["val"], c["test"]):
            record = json.loads((out / "final" / f"trial{c['trial']}-seed{seed}" / "trial.json").read_text())
            assert record["config"]["train"]["seed"] == seed and (record["val"], record["test"]) == (val, test)
        assert c["val_mean"] == pytest.approx(statistics.fmean(c["val"]))
        assert c["test_mean"] == pytest.approx(statistics.fmean(c["test"]))
        if c["trial"] == final["trial"]:
            assert (c["val"], c["test"]) == (final["val"], final["test"])


def _trial(number: int, value: float) -> optuna.trial.FrozenTrial:
    trial = optuna.trial.create_trial(value=value, user_attrs={"config": {"number": number}})
    trial.number = number
    return trial


def test_final_pick_is_the_best_mean_validation(tmp_path, monkeypatch):
    """run_final keeps the candidate of the highest mean validation over the seeds, not the
    highest single score, and the earlier candidate on ties (records given by a stand-in)."""
    from wavygraph.tune import outputs
    from wavygraph.tune.trial import TuneSpec

    # binary fractions: the two equal means are equal exactly
    vals = {(3, 0): 0.9375, (3, 1): 0.5, (5, 0): 0.75, (5, 1): 0.875, (8, 0): 0.875, (8, 1): 0.75}
    asked = []

    def runs(spec, tasks, jobs, devices):
        asked.extend((n, cfg["number"], s) for n, cfg, s in tasks)
        return [{"val": vals[(n, s)], "test": vals[(n, s)] - 0.1} for n, _, s in tasks]

    monkeypatch.setattr(outputs, "_final_runs", runs)
    spec = TuneSpec(None, [], None, str(tmp_path), "", "s", 3)
    final = outputs.run_final(spec, [_trial(3, 0.9375), _trial(5, 0.875), _trial(8, 0.75)], [0, 1])
    assert asked == [(3, 3, 0), (3, 3, 1), (5, 5, 0), (5, 5, 1), (8, 8, 0), (8, 8, 1)]
    assert [c["val_mean"] for c in final["candidates"]] == [0.71875, 0.8125, 0.8125]
    assert final["trial"] == 5 and final["val"] == [0.75, 0.875] and final["val_mean"] == 0.8125
    assert final["test"] == pytest.approx([0.65, 0.775])
    assert json.loads((tmp_path / "final.json").read_text()) == final
    final = outputs.run_final(spec, [_trial(3, 0.9)], [0, 1])  # one candidate: the best trial
    assert final["trial"] == 3 and len(final["candidates"]) == 1


def test_final_runs_in_workers_equal_the_runs_in_process(tmp_path):
    """--jobs 2 runs the final seeds in two spawned workers: the same records as one process."""
    from wavygraph.config import load_config
    from wavygraph.tune import outputs
    from wavygraph.tune.trial import TuneSpec

    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(load_config(CSBM, SMALL + ["train.epochs=3", "train.progress=false"]), resolve=True)
    tasks = [(0, cfg, 0), (0, cfg, 1), (1, {**cfg, "model": {**cfg["model"], "residual": "diffusion"}}, 0)]
    records = {}
    for jobs in (1, 2):
        spec = TuneSpec(None, [], None, str(tmp_path / f"j{jobs}"), "", "s", 1)
        records[jobs] = outputs._final_runs(spec, tasks, jobs, [])
        assert sorted(p.name for p in (tmp_path / f"j{jobs}" / "final").iterdir()) == [
            "trial0-seed0", "trial0-seed1", "trial1-seed0"]
    assert [(r["trial"], r["seed"], r["val"], r["test"]) for r in records[1]] == \
           [(r["trial"], r["seed"], r["val"], r["test"]) for r in records[2]]
    assert records[1][0]["val"] != records[1][1]["val"] or records[1][0]["test"] != records[1][1]["test"]


def test_rerun_of_a_finished_study_runs_nothing(study, capsys):
    out, summary = study
    before = {p.name: p.stat().st_mtime_ns for p in (out / "trials").glob("*/trial.json")}
    again = tune(capsys, out, "--trials", "4", "--final-seeds", "0,1,2", epochs=4)
    assert again["rc"] == 0 and again["best_trial"] == summary["best_trial"]
    assert {p.name: p.stat().st_mtime_ns for p in (out / "trials").glob("*/trial.json")} == before
    assert again["final_test_mean"] == summary["final_test_mean"]


def test_report_of_a_tune_folder(study, tmp_path, capsys):
    out, summary = study
    assert main(["report", str(out), "--out", str(tmp_path / "rep")]) == 0
    text = (tmp_path / "rep" / "summary.md").read_text()
    assert f"**best trial {summary['best_trial']}**" in text and "## Final seeds" in text
    final = json.loads((out / "final.json").read_text())
    for c in final["candidates"] if len(final["candidates"]) > 1 else []:
        assert f"| {c['trial']} | " in text.split("The candidates")[1]
    assert (tmp_path / "rep" / "optimization_history.png").stat().st_size > 0
    assert (tmp_path / "rep" / "param_importance.png").stat().st_size > 0


def test_report_with_one_trial_has_no_importance(tmp_path, capsys):
    out = tmp_path / "one"
    assert tune(capsys, out, "--trials", "1", epochs=2)["rc"] == 0
    assert main(["report", str(out)]) == 0
    assert "parameter importance needs at least 2 complete trials" in (out / "summary.md").read_text()
    assert not (out / "param_importance.png").exists()


@pytest.mark.slow
def test_one_process_study_repeats(tmp_path, capsys):
    a = tune(capsys, tmp_path / "a", "--trials", "3", "--seed", "7")
    b = tune(capsys, tmp_path / "b", "--trials", "3", "--seed", "7")
    strip = ("number", "seconds")
    rows_a = [{k: v for k, v in r.items() if k not in strip} for r in read_rows(tmp_path / "a")]
    rows_b = [{k: v for k, v in r.items() if k not in strip} for r in read_rows(tmp_path / "b")]
    assert rows_a == rows_b and a["best_val"] == b["best_val"]
    c = tune(capsys, tmp_path / "c", "--trials", "3", "--seed", "8")
    assert read_rows(tmp_path / "c")[0]["train.lr"] != read_rows(tmp_path / "a")[0]["train.lr"]
    assert c["rc"] == 0


@pytest.mark.slow
def test_pruning(tmp_path, capsys):
    """Half the space cannot learn (lr 1e-7): after two trials the median
    pruner stops those at the first epoch after the warm-up."""
    space = {"train.lr": {"type": "categorical", "choices": [1e-7, 2e-2]},
             "model.dropout": {"type": "float", "low": 0.0, "high": 0.3}}
    summary = tune(capsys, tmp_path / "p", "--trials", "8", "--pruner-startup", "2", "--warmup", "2",
                   space=space, epochs=12)
    rows = read_rows(tmp_path / "p")
    pruned = [r for r in rows if r["state"] == "PRUNED"]
    assert pruned and summary["pruned"] == len(pruned)
    # once two trials finished, every trial that cannot learn is pruned
    assert all(r["state"] == "PRUNED" for r in rows[2:] if float(r["train.lr"]) == 1e-7)
    for r in pruned:  # stopped early: its folder has no metrics.json, its scores are those when it stopped
        folder = tmp_path / "p" / "trials" / r["number"]
        assert not (folder / "metrics.json").exists() and json.loads((folder / "trial.json").read_text())["val"] \
            == float(r["val"])
    none = tune(capsys, tmp_path / "n", "--trials", "8", "--pruner", "none", space=space, epochs=12)
    assert none["pruned"] == 0 and none["complete"] == 8


def test_baseline_space(tmp_path, capsys):
    summary = tune(capsys, tmp_path / "gcn", "--trials", "2", "--space", str(ROOT / "configs/spaces/gcn.yaml"),
                   epochs=3)
    assert summary["rc"] == 0 and summary["complete"] == 2
    cfg = yaml.safe_load((tmp_path / "gcn" / "best.yaml").read_text())
    assert cfg["model"]["arch"] == "gcn"
    assert set(summary["best_params"]) == {"train.lr", "train.weight_decay", "model.hidden_channels", "model.dropout"}


@pytest.fixture
def dead_pid():
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(proc.stdout)


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")
@pytest.mark.parametrize("storage", ["sqlite", "journal"])
def test_settle_dead_trials(tmp_path, dead_pid, storage):
    url = f"sqlite:///{tmp_path}/s.db" if storage == "sqlite" else f"journal:{tmp_path}/s.log"
    study = st.open_study(st.open_storage(url), "s", {"x": 1}, create=True)
    dist = optuna.distributions.FloatDistribution(0.0, 1.0)
    me = {"host": __import__("socket").gethostname(), "pid": os.getpid(), "token": st.process_token(os.getpid())}
    dead = {**me, "pid": dead_pid, "token": ""}
    trials = []
    for proc in (dead, dead, me, {**dead, "host": "elsewhere"}, None):
        t = study.ask({"x": dist})
        if proc is not None:
            t.set_user_attr("process", proc)
        trials.append(t)
    published = tmp_path / "out" / "trials" / str(trials[1].number)
    published.mkdir(parents=True)
    (published / "trial.json").write_text(json.dumps({"state": "COMPLETE", "val": 0.75, "test": 0.5}))
    assert st.taken(study) == 3  # the live one, the other host's and the one just asked for
    assert st.settle_dead(study, str(tmp_path / "out")) == 2
    states = {t.number: t for t in study.get_trials()}
    assert states[trials[0].number].state == optuna.trial.TrialState.FAIL
    assert states[trials[1].number].state == optuna.trial.TrialState.COMPLETE
    assert states[trials[1].number].value == 0.75 and states[trials[1].number].user_attrs["test"] == 0.5
    for t in trials[2:]:
        assert states[t.number].state == optuna.trial.TrialState.RUNNING
    waiting = study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert len(waiting) == 1 and waiting[0].user_attrs["retry_of"] == trials[0].number
    assert st.settle_dead(study, str(tmp_path / "out")) == 0  # settled once
    assert len(study.get_trials(states=(optuna.trial.TrialState.WAITING,))) == 1
    with pytest.raises(st.SpaceError, match="holds another search"):
        st.open_study(st.open_storage(url), "s", {"x": 2}, create=True)


def test_timeout_starts_no_trial_after_it(tmp_path, capsys):
    summary = tune(capsys, tmp_path / "t", "--trials", "3", "--timeout", "1e-9")
    assert summary["rc"] == 1 and summary["complete"] == 0 and "best_trial" not in summary
    assert read_rows(tmp_path / "t") == []


def test_hyperband_pruner_and_a_baseline_on_the_command_line(tmp_path, capsys):
    summary = tune(capsys, tmp_path / "h", "--trials", "2", "--pruner", "hyperband", "model.arch=gcn",
                   "--space", str(ROOT / "configs/spaces/gcn.yaml"), epochs=4)
    assert summary["rc"] == 0 and summary["complete"] + summary["pruned"] == 2
    assert json.loads((tmp_path / "h" / "tune.json").read_text())["pruner"]["name"] == "hyperband"


def test_starts_are_the_first_trials_once(tmp_path, capsys):
    """The space's starts run first, in order, their other keys drawn; a resumed study does not queue them again."""
    starts = [{"model.residual": "light_wave", "train.lr": 0.02}, {"model.dropout": 0.5, "model.residual": "diffusion"}]
    space = {**SPACE, "starts": starts}
    out = tmp_path / "s"
    summary = tune(capsys, out, "--trials", "3", "--pruner", "none", space=space, epochs=3)
    assert summary["rc"] == 0 and summary["complete"] == 3
    rows = read_rows(out)
    assert [r["start"] for r in rows] == ["0", "1", ""]
    assert rows[0]["model.residual"] == "light_wave" and float(rows[0]["train.lr"]) == 0.02
    assert rows[1]["model.residual"] == "diffusion" and float(rows[1]["model.dropout"]) == 0.5
    for r in rows:  # every searched key has a value, drawn where the start left it out, inside its range
        assert 1e-3 <= float(r["train.lr"]) <= 3e-2 and 0.0 <= float(r["model.dropout"]) <= 0.6
    config = json.loads((out / "trials" / "0" / "trial.json").read_text())["config"]
    assert config["model"]["residual"] == "light_wave" and config["train"]["lr"] == 0.02
    again = tune(capsys, out, "--trials", "4", "--pruner", "none", space=space, epochs=3)
    assert again["rc"] == 0 and again["complete"] == 4
    assert [r["start"] for r in read_rows(out)] == ["0", "1", "", ""]
    # a study started without starts is another search than the same space with them
    plain = tmp_path / "p"
    assert tune(capsys, plain, "--trials", "1", space=SPACE, epochs=2)["rc"] == 0
    rc = main(["tune", CSBM, "--space", write_space(tmp_path, space), *SMALL, "train.epochs=2", f"out_dir={plain}",
               "--no-progress", "--trials", "2"])
    assert rc == 2 and "holds another search (starts differ)" in capsys.readouterr().err


def test_the_base_start_runs_the_base_configs_values(tmp_path, capsys):
    """``base`` queues the base config's values (csbm.yaml: lr 0.001, dropout 0.2, diffusion) as the first trial."""
    space = {**SPACE, "starts": ["base", {"model.residual": "light_wave"}]}
    out = tmp_path / "b"
    summary = tune(capsys, out, "--trials", "2", "--pruner", "none", space=space, epochs=2)
    assert summary["rc"] == 0 and summary["complete"] == 2
    rows = read_rows(out)
    assert [r["start"] for r in rows] == ["0", "1"]
    assert float(rows[0]["train.lr"]) == 0.001 and float(rows[0]["model.dropout"]) == 0.2
    assert rows[0]["model.residual"] == "diffusion" and rows[1]["model.residual"] == "light_wave"
