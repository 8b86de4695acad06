"""The one module that constructs TransformerLens models.

``HookedTransformerConfig(seed=...)`` reseeds the global torch/numpy/random RNGs as a side
effect, and TransformerLens' own initialisation draws from the global torch RNG. We build the
config with ``seed=None, init_weights=False`` and initialise every parameter ourselves from an
explicit ``torch.Generator``: the same seed gives identical weights and the global RNG state is
untouched. A later move to TransformerLens 4.x (``TransformerBridge.boot_native``) only touches
this file.
"""

from __future__ import annotations

import re
import warnings

import torch
from transformer_lens import HookedTransformer, HookedTransformerConfig

from mechinterp_icr.config import ConfigError, ModelConfig

__all__ = ["default_device", "hooked_config", "build_model", "init_weights_", "flops_per_token",
           "parse_heads", "head_name"]


def default_device() -> str:
    """``cuda`` when available, else ``cpu``; nothing requires a GPU."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def hooked_config(cfg: ModelConfig, device: str | None = None) -> HookedTransformerConfig:
    if cfg.d_vocab <= 0 or cfg.n_ctx <= 0:
        raise ConfigError(
            f"model.d_vocab = {cfg.d_vocab!r} / model.n_ctx = {cfg.n_ctx!r} are not allowed here; "
            "expected positive values (they are normally filled in from the task config)")
    norm = None if cfg.normalization == "none" else cfg.normalization
    return HookedTransformerConfig(
        n_layers=cfg.n_layers,
        n_heads=cfg.n_heads,
        d_model=cfg.d_model,
        d_head=cfg.d_head,
        d_mlp=None if cfg.attn_only else cfg.d_mlp,
        d_vocab=cfg.d_vocab,
        n_ctx=cfg.n_ctx,
        act_fn=cfg.act_fn,
        attn_only=cfg.attn_only,
        normalization_type=norm,
        positional_embedding_type=cfg.positional_embedding if cfg.positional_embedding != "none"
        else "standard",
        initializer_range=cfg.init_range if cfg.init_range > 0 else -1.0,
        init_weights=False,
        seed=None,
        device=device or default_device(),
        default_prepend_bos=False,
    )


@torch.no_grad()
def init_weights_(model: HookedTransformer, seed: int, init_range: float | None = None) -> None:
    """Deterministic init from ``seed``: weights ~ N(0, init_range), biases 0, norm scales 1.

    Parameters are visited in sorted-name order so the result does not depend on module order.
    """
    gen = torch.Generator(device="cpu").manual_seed(int(seed))
    std = float(model.cfg.initializer_range if init_range is None else init_range)
    for name, p in sorted(model.named_parameters(), key=lambda kv: kv[0]):
        leaf = name.rsplit(".", 1)[-1]
        if leaf.startswith("b_") or leaf == "b":
            p.zero_()
        elif leaf == "w" and (".ln" in name or name.startswith("ln_final")):
            p.fill_(1.0)
        else:
            p.copy_(torch.randn(p.shape, generator=gen, dtype=torch.float32).to(p) * std)


def build_model(cfg: ModelConfig, seed: int = 0, device: str | None = None) -> HookedTransformer:
    """A HookedTransformer of shape ``cfg`` initialised deterministically from ``seed``."""
    with warnings.catch_warnings():  # TL 3.9 warns that HookedTransformer goes away in 4.0
        warnings.filterwarnings("ignore", message="HookedTransformer is deprecated")
        model = HookedTransformer(hooked_config(cfg, device), move_to_device=True)
    init_weights_(model, seed)
    if cfg.positional_embedding == "none":
        # No positional information: zero and freeze the position embedding.
        model.pos_embed.W_pos.data.zero_()
        model.pos_embed.W_pos.requires_grad_(False)
    model.eval()
    return model


def flops_per_token(cfg: ModelConfig) -> float:
    """Approximate training FLOPs per token (6 x non-embedding params + attention)."""
    per_layer = 4 * cfg.d_model * cfg.n_heads * cfg.d_head
    if not cfg.attn_only:
        per_layer += 2 * cfg.d_model * cfg.d_mlp
    n = cfg.n_layers * per_layer + cfg.d_model * cfg.d_vocab
    attn = cfg.n_layers * 2 * cfg.n_ctx * cfg.n_heads * cfg.d_head
    return 6.0 * n + 6.0 * attn


def head_name(layer: int, head: int) -> str:
    """A head's name everywhere in the package: ``L{layer}H{head}`` (e.g. ``L1H0``)."""
    return f"L{layer}H{head}"


def parse_heads(text: str, n_layers: int, n_heads: int, field: str = "--head"
                ) -> list[tuple[int, int]]:
    """``(layer, head)`` pairs of a head selection: ``all`` (every head, layer-major), or
    names ``LxHy`` joined by commas (order kept, repeats dropped). A name outside the model
    raises ConfigError naming ``field``, the value and what is allowed."""
    text = str(text).strip()
    if text == "all":
        return [(l, h) for l in range(n_layers) for h in range(n_heads)]
    out: list[tuple[int, int]] = []
    for part in text.split(","):
        m = re.fullmatch(r"L(\d{1,6})H(\d{1,6})", part.strip())
        if not m or int(m[1]) >= n_layers or int(m[2]) >= n_heads:
            raise ConfigError(
                f"{field} = {part.strip()[:40]!r} is not allowed; expected all or LxHy with "
                f"x < {n_layers} and y < {n_heads} (e.g. L0H0), several joined by commas")
        if (int(m[1]), int(m[2])) not in out:
            out.append((int(m[1]), int(m[2])))
    return out
