"""Test builders (SAELens style: ``build_*(**overrides)``) and tiny configurations shared by
several test files. Tests import from here, never from each other."""


def build_model_cfg(**overrides):
    from mechinterp_icr.config import ModelConfig

    base = dict(n_layers=2, n_heads=1, d_model=32, d_head=32, d_mlp=64, attn_only=True,
                d_vocab=17, n_ctx=17)
    base.update(overrides)
    return ModelConfig(**base)


def build_train_cfg(**overrides):
    from mechinterp_icr.config import TrainConfig

    base = dict(steps=60, batch_size=32, lr=3e-3, eval_every=0, progress=False,
                checkpoint_schedule="linear", checkpoint_every=20)
    base.update(overrides)
    return TrainConfig(**base)


# A tiny configuration that pretrains and finetunes in a few seconds on one core.
CR_TINY = [
    "task.n_subjects=16", "task.n_grammar=4", "task.n_types=2", "task.n_values=4",
    "task.n_tuples=3", "task.n_demos=2", "task.max_demos=3", "task.grammar_len_max=3",
    "model.d_model=32", "model.d_head=32", "model.d_mlp=64", "model.n_ctx=0",
    "pretrain.steps=300", "pretrain.lr=0.005", "pretrain.batch_size=64",
    "finetune.steps=80", "finetune.lr=0.005", "finetune.batch_size=64",
    "finetune.checkpoint_dense_until=3",
    "eval_n=128", "ckpt_eval_n=32", "eval_ks=[1,2,3]", "allweights_arm=true",
    "sweep=[\"default|\",\"type chain|task.iclgrm_chain=type\",\"sga|task.order=sga\"]",
    "sweep_seeds=1",
]
