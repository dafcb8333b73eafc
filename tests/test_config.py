from pathlib import Path

import pytest
from omegaconf import OmegaConf

from wavygraph.config import Config, ConfigError, load_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def test_defaults_match_dataclasses():
    cfg = load_config(None)
    assert cfg.model.num_layers == Config().model.num_layers
    assert cfg.train.diagnostics is True
    assert cfg.data.name == "cora"


def test_precedence_defaults_yaml_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("model:\n  num_layers: 5\n  hidden_channels: 16\ntrain:\n  lr: 0.5\n")
    cfg = load_config(str(path), ["model.num_layers=7", "train.batch_size=100", "model.residual=mix", "model.residual_options.lam0=0.3"])
    assert cfg.model.num_layers == 7  # override beats YAML
    assert cfg.model.hidden_channels == 16  # YAML beats default
    assert cfg.train.lr == 0.5
    assert cfg.train.batch_size == 100
    assert cfg.model.residual_options.lam0 == pytest.approx(0.3)
    assert cfg.model.dropout == Config().model.dropout  # default kept


@pytest.mark.parametrize(
    "overrides, needle",
    [
        (["model.foo=1"], "model.foo"),
        (["bogus=1"], "bogus"),
        (["train.epochs=abc"], "train.epochs"),
        (["model.use_graph=maybe"], "model.use_graph"),
        (["model.residual=bad"], "model.residual"),
        (["model.kernel=cosine"], "model.kernel"),
        (["model.step_impl=triton"], "model.step_impl"),
        (["model.dropout=1.5"], "model.dropout"),
        (["train.epochs=0"], "train.epochs"),
        (["train.lr=-1"], "train.lr"),
        (["train.num_threads=0"], "train.num_threads"),
        (["novalue"], "novalue"),
    ],
)
def test_bad_overrides_raise_one_line(overrides, needle):
    with pytest.raises(ConfigError) as err:
        load_config(None, overrides)
    msg = str(err.value)
    assert needle in msg and "\n" not in msg


def test_unknown_key_in_yaml(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  epochs: 3\n  learning_rate: 0.1\n")
    with pytest.raises(ConfigError, match="train.learning_rate"):
        load_config(str(path))


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(str(tmp_path / "nope.yaml"))
    bad = tmp_path / "list.yaml"
    bad.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_config(str(bad))


def test_config_stays_strict_after_loading():
    cfg = load_config(None)
    with pytest.raises(Exception):
        cfg.model.not_a_key = 1
    assert OmegaConf.select(cfg, "data.csbm.preset") == "arxiv"


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.yaml")) + sorted(CONFIGS.glob("difformer/*.yaml")),
                         ids=lambda p: p.stem)
def test_shipped_configs_load(path):
    cfg = load_config(str(path))
    assert cfg.out_dir.startswith("runs/")


@pytest.mark.parametrize("name", ["cora", "minesweeper"])
def test_reversible_configs_change_only_the_kind(name):
    """configs/<set>_reversible.yaml is the set's config with the reversible leapfrog kind, its step and
    the mean readout (the time average of the undamped oscillation)."""
    kind_keys = {"model.residual", "model.reversible", "model.tau", "model.tau_layers", "model.readout"}
    base, rev = flat_config(name), flat_config(f"{name}_reversible")
    if name == "cora":  # Cora's identity map and its dropout lower the reversible kind's validation
        kind_keys |= {"model.identity_map", "model.dropout"}
        assert rev["model.identity_map"] is None and rev["model.dropout"] == 0.2
    assert {k for k in base if base[k] != rev[k]} - {"out_dir"} == kind_keys
    assert rev["model.residual"] == "leapfrog" and rev["model.reversible"] is True
    assert rev["model.readout"] == "mean" and rev["model.tau"] == 0.5 and rev["model.tau_layers"] == 16


def test_model_config_covers_every_model_option():
    import dataclasses
    import inspect

    from wavygraph.config import ModelConfig, arch_keys
    from wavygraph.nn import WavyDIFFormer

    params = set(inspect.signature(WavyDIFFormer.__init__).parameters) - {"self", "in_channels", "out_channels"}
    wavy = set(arch_keys("wavy")) - {"arch"}  # the other keys: model.arch and the baselines' own
    assert wavy == params
    from wavygraph.nn.model import DIFFORMER_ARGS

    defaults = {k: p.default for k, p in inspect.signature(WavyDIFFormer.__init__).parameters.items()}
    defaults.update(DIFFORMER_ARGS)  # the config keeps DIFFormer's model; the class defaults are the depth recipe's
    for f in dataclasses.fields(ModelConfig):  # same defaults, except DIFFormer's dropout and a 64-wide model
        if f.name in wavy and f.name not in ("dropout", "hidden_channels"):
            if f.default is dataclasses.MISSING:  # a mutable default: {} (the kind's own options)
                assert f.default_factory() == defaults[f.name] == {}, f.name
            else:
                assert f.default == defaults[f.name], f.name


def test_config_path_builds_difformer_not_the_class_defaults():
    """``build_model`` passes every model key, so the default config is DIFFormer's model (its value projection,
    the local branch added, step 0.5, no source term, dropout on the state, one attention layer per step)."""
    from wavygraph.data import DatasetInfo
    from wavygraph.train.models import build_model

    info = DatasetInfo(name="toy", task="multiclass", metric="acc", num_features=5, num_outputs=3)
    model = build_model(load_config(None), info)  # diffusion: the class default would step 1.0
    conv = model.convs[0]
    assert conv.graph_weight is None and conv.value_proj and model.convs[1] is not conv
    assert not model.source and model.dropout_at == "state" and model.dropout == 0.2
    assert [st.tau for st in model.steppers] == [0.5] * 3
    mix = build_model(load_config(None, ["model.residual=mix"]), info)  # the class default would start from 0.1
    assert [st.lam0 for st in mix.steppers] == [0.5] * 3


def flat_config(name):
    """configs/<name>.yaml loaded and checked, as {dotted key: value}."""
    from wavygraph.utils import flatten

    return flatten(OmegaConf.to_container(load_config(str(CONFIGS / f"{name}.yaml"))))


def recipe_changes(name, ours=None):
    """{key: (DIFFormer's value, ours)} where configs/<ours>.yaml (default: <name>.yaml) differs from
    configs/difformer/<name>.yaml."""
    ours = ours or name
    mine, theirs = flat_config(ours), flat_config(f"difformer/{name}")
    assert mine.pop("out_dir") == f"runs/{ours}" and mine["data.name"] == name
    theirs.pop("out_dir")
    return {k: (theirs[k], v) for k, v in mine.items() if theirs[k] != v}


def test_cora_config_is_the_recipe_with_coras_own_keys():
    """configs/cora.yaml is the depth recipe (configs/cora_recipe.yaml) with the six keys chosen on Cora's
    validation set (docs/frontier.md#cora), at the depth they were chosen at."""
    recipe, cora = flat_config("cora_recipe"), flat_config("cora")
    changed = {k: (recipe[k], cora[k]) for k in cora if recipe[k] != cora[k]}
    assert changed == {"model.input_dropout": (0.0, 0.6), "model.source_weight": (0.25, 0.1),
                       "train.weight_decay": (0.05, 0.1), "model.identity_map": (None, 0.5),
                       "model.dropout": (0.2, 0.5), "model.residual": ("light_wave", "diffusion"),
                       "model.num_layers": (8, 16),
                       "out_dir": ("runs/cora_recipe", "runs/cora")}


def test_planetoid_configs_carry_the_cora_recipe():
    """configs/<set>.yaml is DIFFormer's run.sh line for that set (configs/difformer/<set>.yaml)
    plus the recipe's changes, the same changes for cora, citeseer and pubmed (Cora also has its
    own weight decay); the attention stays on (graph_weight < 1) and the residual kind is a wave kind."""
    cora = recipe_changes("cora", "cora_recipe")
    # DIFFormer tunes the weight decay per set (0.01 / 1.0 / 1e-4); Cora's was re-chosen by validation
    assert cora.pop("train.weight_decay") == (0.01, 0.05)
    assert recipe_changes("citeseer") == cora and recipe_changes("pubmed") == cora
    assert cora["model.residual"][1] in {"wave", "mix", "light_wave", "light_wave_joint"}
    assert cora["model.graph_weight"][1] < 1 and "model.num_layers" not in cora
    assert not {k for k in cora if k.startswith("data.")}


def test_minesweeper_recipe_config_carries_the_recipes_model():
    """configs/minesweeper_recipe.yaml is the Cora recipe's model (every model key of configs/cora_recipe.yaml
    but the depth, chosen per data set by validation) with its own data and training block."""
    cora, mines = flat_config("cora_recipe"), flat_config("minesweeper_recipe")
    model = {k for k in cora if k.startswith("model.") and k != "model.num_layers"}
    assert {k: mines[k] for k in model} == {k: cora[k] for k in model}
    assert mines["data.name"] == "minesweeper" and mines["model.graph_weight"] < 1


def test_arxiv_standin_recipe_sweep_sets_the_recipes_model_changes():
    """configs/sweeps/arxiv_standin_recipe.yaml sets exactly the recipe's model changes (the residual
    kind comes from its grid), so the stand-in cells follow configs/cora_recipe.yaml."""
    sweep = OmegaConf.to_container(OmegaConf.load(CONFIGS / "sweeps" / "arxiv_standin_recipe.yaml"))
    model = {k: v for k, v in sweep["set"].items() if k.startswith("model.")}
    recipe = {k: v for k, (_, v) in recipe_changes("cora", "cora_recipe").items() if k.startswith("model.") and k != "model.residual"}
    assert model == recipe
    assert recipe_changes("cora", "cora_recipe")["model.residual"][1] in sweep["grid"]["model.residual"]
