"""wavygraph.tune.space: the space file checked against the config schema,
and ``wavygraph tune`` refusing a bad space or option with one line, exit 2,
before anything is written."""
from pathlib import Path

import pytest
import yaml

from wavygraph.cli import main
from wavygraph.tune.space import SpaceError, key_type, load_space, parse_space

ROOT = Path(__file__).resolve().parents[2]
CSBM = str(ROOT / "configs" / "csbm.yaml")
SMALL = ["data.csbm.preset=small", "model.num_layers=2", "train.epochs=2", "train.num_threads=1"]


def write(tmp_path: Path, space, name="space.yaml") -> str:
    path = tmp_path / name
    path.write_text(space if isinstance(space, str) else yaml.safe_dump(space, sort_keys=False))
    return str(path)


def test_parse_flat_nested_and_fixed(tmp_path):
    space = parse_space(write(tmp_path, {
        "train": {"lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}},
        "model.hidden_channels": {"type": "int", "low": 16, "high": 64, "step": 16},
        "model.residual": {"type": "categorical", "choices": ["diffusion", "light_wave"]},
        "model.graph_weight": {"type": "categorical", "choices": [None, 0.5, 1]},
        "model.tau": {"type": "int", "low": 1, "high": 2},  # an int range for a float key is fine
        "model.residual_options.lam0": {"type": "float", "low": 0.1, "high": 0.9},
        "model.arch": "wavy",
    }))
    assert list(space.params) == ["train.lr", "model.hidden_channels", "model.residual", "model.graph_weight",
                                  "model.tau", "model.residual_options.lam0"]
    assert space.fixed == {"model.arch": "wavy"}
    d = space.distributions()
    assert d["train.lr"].log and d["train.lr"].low == 1e-4
    assert d["model.hidden_channels"].step == 16
    assert d["model.graph_weight"].choices == (None, 0.5, 1)


def test_key_types():
    assert key_type("model.num_layers") == (int, False)
    assert key_type("model.graph_weight") == (float, True)
    assert key_type("model.residual") == (str, False)
    assert key_type("model.use_graph") == (bool, False)
    with pytest.raises(SpaceError, match="unknown config key 'model.nope'"):
        key_type("model.nope")
    with pytest.raises(SpaceError, match="section"):
        key_type("model")


@pytest.mark.parametrize("space, message", [
    ({"model.nope": {"type": "float", "low": 0, "high": 1}}, "unknown config key 'model.nope'"),
    ({"model.residual": {"type": "categorical", "choices": []}}, "choices must be a non-empty list"),
    ({"model.dropout": {"type": "float", "low": 0.5, "high": 0.1}}, r"low=0.5 > high=0.1"),
    ({"train.lr": {"type": "float", "low": 0.0, "high": 0.1, "log": True}}, "log=true needs low > 0"),
    ({"model.num_layers": {"type": "float", "low": 2, "high": 8}}, "int key and cannot take a float"),
    ({"model.dropout": {"type": "categorical", "choices": [0.1, "high"]}}, "float key; the choice 'high'"),
    ({"model.use_graph": {"type": "int", "low": 0, "high": 1}}, "bool key and cannot take an int"),
    ({"model.num_layers": {"type": "categorical", "choices": [2, 4.5]}}, "int key; the choice 4.5"),
    ({"model.num_layers": {"type": "categorical", "choices": [True, 2]}}, "int key; the choice True"),
    ({"model.dropout": {"type": "categorical", "choices": [None, 0.1]}}, "the choice None"),
    ({"model.dropout": {"type": "uniform", "low": 0, "high": 1}}, "type must be one of"),
    ({"model.dropout": {"type": "float", "low": 0, "hi": 1}}, "not hi"),
    ({"model.dropout": {"type": "float", "low": 0}}, "needs low and high"),
    ({"model.dropout": {"type": "float", "low": "a", "high": 1}}, "low must be a number"),
    ({"train.lr": {"type": "float", "low": 0.1, "high": 1, "log": True, "step": 0.1}}, "cannot be combined"),
    ({"model.residual": {"type": "categorical", "choices": ["wave", "wave"]}}, "repeat a value"),
    ({"out_dir": {"type": "categorical", "choices": ["a", "b"]}}, "set by wavygraph tune itself"),
    ({"model.arch": "gcn"}, "has no distribution"),
    ([1, 2], "mapping of config keys"),
])
def test_bad_spaces(tmp_path, space, message):
    with pytest.raises(SpaceError, match=message):
        parse_space(write(tmp_path, space))


@pytest.mark.parametrize("space, overrides, message", [
    ({"model.dropout": {"type": "float", "low": 0.0, "high": 1.0}}, [], r"model.dropout=1.0.*\[0, 1\)"),
    ({"model.residual": {"type": "categorical", "choices": ["diffusion", "nope"]}}, [], "model.residual='nope'"),
    ({"train.lr": {"type": "float", "low": 1e-4, "high": 1e-2}}, ["train.lr=0.1"], "searched by the space and also"),
    ({"model.tau": {"type": "float", "low": 0.1, "high": 1}, "model.arch": "gcn"}, [], "does not apply"),
])
def test_space_against_the_base_config(tmp_path, space, overrides, message):
    with pytest.raises(SpaceError, match=message):
        load_space(write(tmp_path, space), CSBM, SMALL + overrides)


SPACES = sorted(p.stem for p in (ROOT / "configs" / "spaces").glob("*.yaml"))
WAVY_SPACES = ("wavy", "reversible")  # spaces of the WavyDIFFormer itself (no model.arch)


def test_every_space_is_checked():
    assert set(SPACES) == {"wavy", "reversible", "gcn", "gcnii", "sgformer"}


@pytest.mark.parametrize("name", SPACES)
def test_shipped_spaces_fit_the_cora_base(name):
    base = "cora_reversible" if name == "reversible" else "cora"  # the config each space's header tunes from
    space = load_space(str(ROOT / "configs" / "spaces" / f"{name}.yaml"), str(ROOT / "configs" / f"{base}.yaml"),
                       ["model.num_layers=16"])
    assert "model.num_layers" not in space.params  # the depth is the user's
    if name in WAVY_SPACES:  # the attention stays on: the local branch's blend stays below 1
        assert "model.arch" not in space.fixed
        assert space.params["model.graph_weight"]["high"] < 1
    else:
        assert space.fixed["model.arch"] == name
    if name == "reversible":
        assert space.fixed["model.reversible"] is True and space.fixed["model.readout"] == "mean"
    # the starts are the base config, then the per-set configs (weight decay 0 as the range's low end); from
    # the space's own Cora config the base is the first of them and runs once
    stems = {"wavy": ["cora", "minesweeper", "actor", "squirrel_filtered"],
             "reversible": ["cora_reversible", "minesweeper_reversible"]}.get(name, [])
    if stems:
        for i, stem in enumerate(stems):
            assert space.starts[i] == config_point(space, stem), stem
        assert len(space.starts) == len(stems)
        # from another base (citeseer: weight decay 1.0) the base's point comes first
        other = load_space(str(ROOT / "configs" / "spaces" / f"{name}.yaml"), str(ROOT / "configs" / "citeseer.yaml"),
                           ["model.num_layers=16"])
        if name == "wavy":
            assert other.starts[0] == config_point(space, "citeseer") and other.starts[1:] == space.starts
            assert other.starts[0]["train.weight_decay"] == 1.0
        else:  # the reversible space fixes the kind: citeseer's light_wave keys are not searched
            assert other.starts[1:] == space.starts and other.starts[0]["train.weight_decay"] == 1.0
    else:  # the baselines start from their papers' settings (GCN, GCNII) or from draws (SGFormer)
        assert len(space.starts) == {"gcn": 1, "gcnii": 1, "sgformer": 0}[name]


def config_point(space, stem: str) -> dict:
    """The searched keys' values in configs/<stem>.yaml, weight decay 0 as the range's low end."""
    from omegaconf import OmegaConf

    from wavygraph.config import load_config

    cfg = load_config(str(ROOT / "configs" / f"{stem}.yaml"))
    point = {k: OmegaConf.select(cfg, k) for k in space.params}
    if point["train.weight_decay"] == 0:
        point["train.weight_decay"] = space.params["train.weight_decay"]["low"]
    return point


GOOD = {"train.lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True}}


@pytest.mark.parametrize("space, args, message", [
    ({"model.nope": {"type": "float", "low": 0, "high": 1}}, [], "unknown config key 'model.nope'"),
    ({"model.residual": {"type": "categorical", "choices": []}}, [], "non-empty list"),
    ({"model.dropout": {"type": "float", "low": 0.5, "high": 0.1}}, [], "> high"),
    ({"model.num_layers": {"type": "float", "low": 2, "high": 8}}, [], "int key"),
    (GOOD, ["--trials", "0"], "--trials must be >= 1"),
    (GOOD, ["--jobs", "0"], "--jobs must be >= 1"),
    (GOOD, ["--final-top", "0"], "--final-top must be >= 1"),
    (GOOD, ["--timeout", "-1"], "--timeout must be > 0"),
    (GOOD, ["--final-seeds", "0,x"], "--final-seeds must be comma-separated integers"),
    (GOOD, ["--final-seeds", "1,1"], "distinct"),
    (GOOD, ["--storage", "nonsense"], "neither an SQLAlchemy URL"),
    (GOOD, ["--timeout", "nan"], "--timeout must be > 0 seconds and finite"),
    (GOOD, ["--final-seeds", ""], "--final-seeds must list distinct integers"),
    (GOOD, ["--trials", "x"], "argument --trials: invalid int value"),
    (GOOD, ["--pruner", "bogus"], "argument --pruner: invalid choice"),
    (GOOD, ["--storage", "garbage://x"], "cannot open --storage garbage://x"),
    (GOOD, ["--storage", "sqlite:////nonexistent_dir_xyz/sub/x.db"], "the folder /nonexistent_dir_xyz/sub does not"),
    (GOOD, ["--devices", "cuda:99"], "--devices: train.device='cuda:99'"),
    (GOOD, ["train.device=tpu"], "train.device='tpu'"),
    (GOOD, ["model.nope=1"], "unknown config key"),
    (None, [], "--space SPACE.yaml is required"),
])
def test_cli_bad_input_one_line_exit_2_nothing_written(tmp_path, capsys, space, args, message):
    out = tmp_path / "study"
    argv = ["tune", CSBM, *SMALL, f"out_dir={out}", *args]
    if space is not None:
        argv += ["--space", write(tmp_path, space)]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's errors (one line through OneLineParser)
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("wavygraph: error: ") and "\n" not in err and message.split("*")[0].strip("\\") in err
    assert not out.exists()


def test_cli_checks_paths_and_base_data_before_writing(tmp_path, capsys):
    """out_dir or a journal under a file, and base data every trial would fail on: one line, nothing written."""
    import torch
    from torch_geometric.data import Data

    (tmp_path / "a_file").write_text("x")
    mask = torch.zeros(8, dtype=torch.bool)
    torch.save(Data(x=torch.randn(8, 2), edge_index=torch.zeros(2, 0, dtype=torch.long), y=torch.arange(8) % 2,
                    train_mask=~mask, val_mask=mask, test_mask=mask), tmp_path / "g.pt")
    space = write(tmp_path, GOOD)
    before = sorted(p.name for p in tmp_path.iterdir())
    for args, message in [
        ([f"out_dir={tmp_path / 'a_file' / 'study'}"], "a_file is a file, so no folder can be made under it"),
        (["--storage", f"journal:{tmp_path / 'a_file' / 'j.log'}"], "a_file is a file, not a folder"),
        (["data.name=file", f"data.path={tmp_path / 'g.pt'}"], "val_mask selects no node"),
    ]:
        argv = ["tune", CSBM, *SMALL, f"out_dir={tmp_path / 'study'}", "--space", space, *args]
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("wavygraph: error: ") and "\n" not in err and message in err, err
        assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_study_on_a_changed_graph_file_is_refused(tmp_path, capsys):
    """The graph file's content is part of the study: resumed on another version, its trials would mix."""
    import torch
    from torch_geometric.data import Data

    def save(seed):
        g = torch.Generator().manual_seed(seed)
        mask = torch.arange(30)
        torch.save(Data(x=torch.randn(30, 3, generator=g), edge_index=torch.randint(0, 30, (2, 60), generator=g),
                        y=mask % 2, train_mask=mask < 15, val_mask=(mask >= 15) & (mask < 22), test_mask=mask >= 22),
                   tmp_path / "g.pt")

    save(0)
    argv = ["tune", CSBM, *SMALL, "data.name=file", f"data.path={tmp_path / 'g.pt'}", f"out_dir={tmp_path / 'study'}",
            "--space", write(tmp_path, GOOD), "--trials", "1", "--no-progress", "--pruner", "none"]
    assert main(argv) == 0
    save(1)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("wavygraph: error: ") and "\n" not in err and "another version of the graph file" in err
    save(0)
    assert main(argv) == 0  # the same content again: the study goes on


def test_cli_refuses_a_folder_that_is_not_a_tune_folder(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "metrics.json").write_text("{}")
    assert main(["tune", CSBM, *SMALL, f"out_dir={out}", "--space", write(tmp_path, GOOD)]) == 2
    assert "not a tune folder" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == ["metrics.json"]


STARTED = {"train.lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True},
           "model.residual": {"type": "categorical", "choices": ["diffusion", "light_wave"]},
           "model.hidden_channels": {"type": "int", "low": 8, "high": 32}}


def test_starts_are_parsed_flat_or_nested(tmp_path):
    space = parse_space(write(tmp_path, {**STARTED, "starts": [
        {"train.lr": 0.005, "model.residual": "light_wave"},
        {"model": {"residual": "diffusion", "hidden_channels": 8}}]}))
    assert space.starts == [{"train.lr": 0.005, "model.residual": "light_wave"},
                            {"model.residual": "diffusion", "model.hidden_channels": 8}]
    assert "starts" not in space.params and "starts" not in space.fixed
    assert parse_space(write(tmp_path, STARTED)).starts == []


@pytest.mark.parametrize("starts, message", [
    ({"train.lr": 0.005}, "starts must be a list of mappings"),
    ([{}], "starts must be a list of mappings"),
    ([{"model.dropout": 0.1}], r"starts\[0\]: model.dropout is not searched by the space"),
    ([{"train.lr": 0.5}], r"starts\[0\]: train.lr=0.5 lies outside its distribution"),
    ([{"model.residual": "wave"}], r"starts\[0\]: model.residual='wave' lies outside"),
    ([{"model.hidden_channels": 8.5}], "model.hidden_channels=8.5 lies outside"),
    ([{"model.hidden_channels": True}], "model.hidden_channels=True lies outside"),
    ([{"train.lr": 0.005}, {"train.lr": 0.005}], r"starts\[1\] repeats an earlier start"),
    (["base", "base"], r"starts\[1\] repeats an earlier start"),
    (["bse"], "starts must be a list of mappings"),
    ([None], "starts must be a list of mappings"),
])
def test_bad_starts(tmp_path, starts, message):
    with pytest.raises(SpaceError, match=message):
        parse_space(write(tmp_path, {**STARTED, "starts": starts}))


def test_a_start_is_checked_as_a_whole_point_on_the_base_config(tmp_path):
    """Each key alone is valid; together with the base they are not (the message names the start)."""
    space = {"model.local": {"type": "categorical", "choices": ["gcn", "sep"]},
             "model.use_graph": {"type": "categorical", "choices": [True, False]},
             "starts": [{"model.local": "sep", "model.use_graph": True}]}
    assert load_space(write(tmp_path, space), CSBM, SMALL).starts == space["starts"]
    space["starts"].append({"model.local": "sep", "model.use_graph": False})
    with pytest.raises(SpaceError, match=r"starts\[1\]: model.local='sep' needs model.use_graph=true"):
        load_space(write(tmp_path, space), CSBM, SMALL)


def based(tmp_path: Path, values: dict) -> str:
    """configs/csbm.yaml with ``values`` (dotted keys) written into a new base config file."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.load(CSBM)
    for key, value in values.items():
        OmegaConf.update(cfg, key, value)
    path = tmp_path / "base.yaml"
    OmegaConf.save(cfg, path)
    return str(path)


def test_the_base_start_is_the_base_configs_point(tmp_path):
    """``base``: each searched key at the base's value, a number outside its range at the nearest end (on the
    step's grid for a stepped one), a value outside a categorical's choices left out (drawn); in file order."""
    space = {"train.lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True},
             "train.weight_decay": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
             "model.hidden_channels": {"type": "int", "low": 8, "high": 40, "step": 16},
             "model.dropout": {"type": "float", "low": 0.0, "high": 0.6},
             "model.residual": {"type": "categorical", "choices": ["diffusion", "light_wave"]},
             "model.kernel": {"type": "categorical", "choices": ["sigmoid"]},
             "starts": [{"train.lr": 0.005}, "base"]}
    values = {"train.lr": 0.0005, "train.weight_decay": 0, "model.hidden_channels": 33, "model.dropout": 0.3,
              "model.residual": "light_wave", "model.kernel": "simple"}
    got = load_space(write(tmp_path, space), based(tmp_path, values), SMALL).starts
    # 0.0005 < low: low; 0 < low: low; 33 on the grid 8, 24, 40: 40; 0.3 inside; light_wave a choice;
    # simple not a choice: drawn
    assert got == [{"train.lr": 0.005},
                   {"train.lr": 1e-3, "train.weight_decay": 1e-4, "model.hidden_channels": 40, "model.dropout": 0.3,
                    "model.residual": "light_wave"}]
    assert isinstance(got[1]["model.hidden_channels"], int) and isinstance(got[1]["model.dropout"], float)
    values.update({"model.hidden_channels": 100, "model.dropout": 0.9})  # above the ranges: the high ends
    got = load_space(write(tmp_path, space), based(tmp_path, values), SMALL).starts[1]
    assert got["model.hidden_channels"] == 40 and got["model.dropout"] == 0.6
    values["model.hidden_channels"] = 15  # nearer 8 than 24
    assert load_space(write(tmp_path, space), based(tmp_path, values), SMALL).starts[1]["model.hidden_channels"] == 8
    # a null among a categorical's choices is a point: the base's null is kept, not drawn
    space["model.identity_map"] = {"type": "categorical", "choices": [None, 0.5]}
    got = load_space(write(tmp_path, space), based(tmp_path, values), SMALL).starts[1]
    assert "model.identity_map" in got and got["model.identity_map"] is None
    values["model.identity_map"] = 0.5
    assert load_space(write(tmp_path, space), based(tmp_path, values), SMALL).starts[1]["model.identity_map"] == 0.5
    values["model.identity_map"] = 0.7  # not a choice: drawn
    assert "model.identity_map" not in load_space(write(tmp_path, space), based(tmp_path, values), SMALL).starts[1]


def test_a_base_start_equal_to_a_listed_start_runs_once(tmp_path):
    point = {"train.lr": 0.005, "model.residual": "diffusion", "model.hidden_channels": 16}  # csbm.yaml: diffusion
    space = {**STARTED, "starts": ["base", point, {"train.lr": 0.002}]}
    base = based(tmp_path, {"train.lr": 0.005, "model.hidden_channels": 16})
    assert load_space(write(tmp_path, space), base, SMALL).starts == [point, {"train.lr": 0.002}]
    space["starts"] = [point, "base"]
    assert load_space(write(tmp_path, space), base, SMALL).starts == [point]
    space["starts"] = [{k: v for k, v in point.items() if k != "model.residual"}, "base"]  # not equal: both run
    assert load_space(write(tmp_path, space), base, SMALL).starts == [space["starts"][0], point]
    # a base with no value the space can take queues nothing
    space = {"model.kernel": {"type": "categorical", "choices": ["sigmoid"]}, "starts": ["base"]}
    assert load_space(write(tmp_path, space), CSBM, SMALL).starts == []

