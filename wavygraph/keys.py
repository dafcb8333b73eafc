"""Config keys that do not change a run's result, read by the sweep's cell
hash (:func:`wavygraph.sweep.spec.cell_hash`) and by the config check of
``train.resume`` (:func:`wavygraph.train.resume.config_diff`)."""

#: Config keys left out of a cell's hash: they do not change its result
#: (beyond the rounding of float sums, for the device, thread count and step_impl;
#: gradient checkpointing recomputes the same numbers, tested equal).
UNHASHED_KEYS = (
    "out_dir", "data.root", "train.device", "train.progress", "train.num_threads",
    "train.checkpoint_every", "train.resume", "train.dist_backend", "model.step_impl",
    "model.gradient_checkpointing", "model.checkpoint_segments",
)
#: Options added to the config after sweep folders existed, with the value
#: that reproduces the behaviour from before: left out of the hash while
#: they hold it, so adding an option does not invalidate finished cells.
#: Every new config key belongs here (or in :data:`UNHASHED_KEYS`).
UNHASHED_AT = {
    "train.distributed": False,
    "model.arch": "wavy", "model.gcnii_alpha": 0.1, "model.gcnii_theta": 0.5, "model.gcnii_shared_weights": True,
    "model.gcnii_conv_weight_decay": 0.01, "model.sgformer_trans_layers": 1, "model.sgformer_trans_dropout": 0.2,
    "model.sgformer_graph_weight": 0.8, "model.sgformer_trans_weight_decay": 0.001,
    "model.input_dropout": 0.0, "model.source_weight": 1.0, "model.shared_attention": False,
    "data.split_mode": "given", "data.per_class": 20, "data.num_val": 500, "data.num_test": 1000,
    "data.path": None, "data.features": None, "data.labels": None, "data.train_fraction": 0.6,
    "data.val_fraction": 0.2, "model.reversible": False,
}
