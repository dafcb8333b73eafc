"""The one table of config keys that do not change a result, as the sweep's
cell hash and resume's config check read it."""
import pytest
from omegaconf import OmegaConf

from wavygraph import keys
from wavygraph.config import Config
from wavygraph.sweep import cell_hash
from wavygraph.train.resume import config_diff
from wavygraph.utils import flatten


def test_every_listed_key_is_a_config_key():
    schema = flatten(OmegaConf.to_container(OmegaConf.structured(Config)))
    assert sorted(set(keys.NEUTRAL_KEYS) - set(schema)) == []
    kinds = {keys.NOTHING, keys.ROUNDING, keys.OUTPUTS}
    assert all(kind in kinds or isinstance(kind, keys.Added) for kind in keys.NEUTRAL_KEYS.values())


#: The config keys that change a result at every value, as they stood when the first results were written;
#: a key added since goes in keys.NEUTRAL_KEYS (as Added, at the value that gives the old behaviour), so that
#: finished sweep cells, tuning studies and checkpoints written before it stay valid.
RESULT_KEYS = {
    "data.csbm.avg_degree", "data.csbm.homophily", "data.csbm.label_noise", "data.csbm.num_classes",
    "data.csbm.num_communities", "data.csbm.num_edge_features", "data.csbm.num_features", "data.csbm.num_nodes",
    "data.csbm.num_tasks", "data.csbm.preset", "data.csbm.seed", "data.csbm.snr", "data.download", "data.name",
    "data.normalize_features", "data.split", "imports", "model.dropout", "model.dropout_at", "model.featscale",
    "model.ffn", "model.ffn_activation", "model.force_scale", "model.graph_weight", "model.heads",
    "model.hidden_channels", "model.input_norm", "model.kernel", "model.layer_dropout", "model.norm",
    "model.num_layers", "model.qk_norm", "model.residual", "model.source", "model.tau", "model.use_graph",
    "model.value_proj", "train.batch_size", "train.epochs", "train.eval_batch_size", "train.eval_every", "train.lr",
    "train.patience", "train.seed", "train.weight_decay",
}


def test_a_new_config_key_is_listed():
    """Every config key is a result key of the first results or listed in NEUTRAL_KEYS: a key added
    without a listing would change every earlier cell's hash and refuse earlier studies and checkpoints."""
    schema = flatten(OmegaConf.to_container(OmegaConf.structured(Config)))
    assert sorted(set(schema) - set(keys.NEUTRAL_KEYS) - RESULT_KEYS) == []
    assert cell_hash(_with("model.identity_map", None)) == cell_hash(BASE)


BASE = {"model": {"num_layers": 4}, "train": {"seed": 0}}


def _with(key, value):
    section, name = key.split(".")
    return {**BASE, section: {**BASE.get(section, {}), name: value}}


@pytest.mark.parametrize(
    "key, a, b, same_cell, resumes",
    [
        ("data.root", "/a", "/b", True, True),  # NOTHING
        ("model.checkpoint_segments", 2, None, True, True),
        ("train.num_threads", 1, 4, True, False),  # ROUNDING: a resumed run keeps it
        ("model.step_impl", "eager", "compile", True, False),
        ("train.diagnostics", True, False, False, True),  # OUTPUTS: a cell of its own
        ("model.num_layers", 4, 8, False, False),  # not listed: changes the result
    ],
)
def test_what_each_kind_leaves_out(key, a, b, same_cell, resumes):
    assert keys.hash_ignores(key, a) == keys.hash_ignores(key, b) == same_cell
    assert (cell_hash(_with(key, a)) == cell_hash(_with(key, b))) == same_cell
    assert keys.resume_ignores(key, a, b) == resumes
    assert (config_diff(_with(key, a), _with(key, b)) == []) == resumes


def test_an_added_key_at_its_old_value():
    """``model.reversible`` (added later, old behaviour ``False``): an old
    config without it is the same cell and resumes; ``True`` is another."""
    assert cell_hash(_with("model.reversible", False)) == cell_hash(BASE)
    assert cell_hash(_with("model.reversible", True)) != cell_hash(BASE)
    assert config_diff(BASE, _with("model.reversible", False)) == []
    assert config_diff(BASE, _with("model.reversible", True)) == ["model.reversible"]
