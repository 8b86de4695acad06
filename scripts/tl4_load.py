"""Load a mechinterp_icr checkpoint with TransformerLens 4 (``TransformerBridge``), without
this package.

TransformerLens 4 removed ``HookedTransformer``; its TL-native bridge
(``TransformerBridge.boot_native``) computes the same function. This script needs only
``transformer_lens`` 4.x, ``torch`` and ``safetensors`` (it never imports ``mechinterp_icr``),
so a reader can copy it next to a checkpoint::

    from tl4_load import load_bridge
    bridge = load_bridge("runs/cr/checkpoints/ft-icl-0000080")   # STEM, STEM.json or .safetensors
    logits, cache = bridge.run_with_cache(tokens)                # TL 3.9's hook names and shapes

    python scripts/tl4_load.py runs/cr/checkpoints/ft-icl-0000080   # prints the logits' shape

A checkpoint is ``STEM.safetensors`` (the weights under ``model.<TL 3.9 name>``) and
``STEM.json``, whose ``hooked_transformer_config`` is the model's ``HookedTransformerConfig``
with ``dtype`` stored by name (``"float32"``) and ``device`` null. What :func:`load_bridge` does:

- builds a ``TransformerBridgeConfig`` from that dict and boots the TL-native model on it;
- IR checkpoints (``act_fn="relu2"``, ``relu(x)**2``): ``boot_native``'s activation table lacks
  relu2 (TransformerLens 4.3), so the one in ``transformer_lens.utilities.activation_functions``
  is registered there first (the same formula as TL 3.9's);
- converts the TL 3.9 weight names and per-head shapes with ``convert_tl_checkpoint`` and loads
  them with ``strict=True`` (nothing missing, nothing left over);
- ``enable_compatibility_mode(no_processing=True)``: TL 3.9's hook names and shapes with the
  weights as trained. Its defaults would fold value biases into ``b_O`` and centre the
  unembedding and the writing weights, changing the weights and several activations;
- ``eval()``; the global torch RNG is left as it was (booting draws a random initialisation).

Measured equal to TL 3.9 (``tests/slow/test_tl4_loader.py``): the logits and every cached
activation of CR, mechanism and IR checkpoints, except ``hook_attn_scores``: on the bridge it
holds the post-softmax pattern (the same as ``hook_pattern``), not the scaled, masked
pre-softmax scores, so the loader warns about it once. ``unembed.b_U`` is a buffer, not a
parameter, on the bridge (it does not train). Bad input (a missing file, a file that is not a
checkpoint) is one line on stderr naming the path and exit code 2.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path

__all__ = ["CheckpointLoadError", "load_bridge", "read_hooked_config", "main"]

ATTN_SCORES_WARNING = (
    "TransformerBridge's hook_attn_scores holds the post-softmax attention pattern (the same "
    "as hook_pattern), not TL 3.9's scaled, masked pre-softmax scores; every other hook and "
    "the logits equal TL 3.9's")
_warned = False
_MAX_SIDECAR_BYTES = 16 * 1024**2


class CheckpointLoadError(ValueError):
    """The path is not a loadable checkpoint: the message names it and says why."""


def _stem(path: str | os.PathLike) -> Path:
    p = Path(path)
    if p.suffix in (".json", ".safetensors"):
        return p.with_suffix("")
    return p


def read_hooked_config(checkpoint_path: str | os.PathLike) -> dict:
    """The sidecar's ``hooked_transformer_config`` (a dict; ``dtype`` still a name). Raises
    :class:`CheckpointLoadError` for a missing, unreadable or foreign sidecar."""
    stem = _stem(checkpoint_path)
    side = stem.with_suffix(".json")
    if Path(checkpoint_path).is_dir():
        raise CheckpointLoadError(f"{checkpoint_path} is a directory, not a checkpoint; give "
                                  "CHECKPOINTS/STEM (or STEM.json), e.g. "
                                  "runs/cr/checkpoints/pretrain-0000300")
    if not side.is_file():
        what = "is not a regular file" if os.path.lexists(side) else "does not exist"
        raise CheckpointLoadError(f"checkpoint sidecar {side} {what} (a checkpoint is "
                                  "STEM.json + STEM.safetensors)")
    try:
        if side.stat().st_size > _MAX_SIDECAR_BYTES:
            raise CheckpointLoadError(f"{side} is too large to be a checkpoint sidecar")
        data = json.loads(side.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        if isinstance(e, CheckpointLoadError):
            raise
        raise CheckpointLoadError(f"{side} is not a checkpoint sidecar (not readable JSON: "
                                  f"{str(e)[:120]})") from None
    cfg = data.get("hooked_transformer_config") if isinstance(data, dict) else None
    if not isinstance(cfg, dict):
        raise CheckpointLoadError(f"{side} has no 'hooked_transformer_config' (not a "
                                  "mechinterp_icr checkpoint, or one written before the field "
                                  "existed: load it with mechinterp_icr)")
    return dict(cfg)


def _bridge_config(cfg: dict, side: Path, device: str | None):
    import torch
    from transformer_lens.config import TransformerBridgeConfig

    cfg = dict(cfg)
    name = cfg.get("dtype") or "float32"
    dtype = getattr(torch, str(name).removeprefix("torch."), None)
    if not isinstance(dtype, torch.dtype):
        raise CheckpointLoadError(f"{side}: dtype {name!r} is not a torch dtype")
    cfg["dtype"] = dtype
    cfg["device"] = device or "cpu"
    try:
        return TransformerBridgeConfig.from_dict(cfg)
    except (TypeError, ValueError, KeyError, AssertionError) as e:
        raise CheckpointLoadError(f"{side}: its hooked_transformer_config is not a valid "
                                  f"TransformerLens config: {str(e)[:200]}") from None


def _register_relu2() -> None:
    """Add relu2 to boot_native's activation table (absent in TransformerLens 4.3)."""
    from transformer_lens.model_bridge.sources.native import model as native_model
    from transformer_lens.utilities import activation_functions

    table = getattr(native_model, "_ACTIVATIONS", None)
    if table is None:  # a later TransformerLens moved the table: let boot_native decide
        return
    table.setdefault("relu2", activation_functions.relu2)


def _warn_attn_scores_once() -> None:
    global _warned
    if not _warned:
        _warned = True
        warnings.warn(ATTN_SCORES_WARNING, UserWarning, stacklevel=3)


def load_bridge(checkpoint_path: str | os.PathLike, device: str | None = None):
    """A ``TransformerBridge`` (TransformerLens 4) holding one of this project's checkpoints, in
    eval mode, with TL 3.9's hook names and the weights as trained (no weight processing).

    ``checkpoint_path``: ``STEM``, ``STEM.json`` or ``STEM.safetensors``. ``device``: where
    the model goes (default cpu). Raises :class:`CheckpointLoadError` (naming the path) when
    the path is not a loadable checkpoint. Warns once that ``hook_attn_scores`` differs from
    TL 3.9's (see the module's doc).
    """
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    from transformer_lens.model_bridge import TransformerBridge
    from transformer_lens.model_bridge.sources import native as _native  # noqa: F401 (boot_native)
    from transformer_lens.utilities.tl_checkpoint_conversion import convert_tl_checkpoint

    stem = _stem(checkpoint_path)
    side, wpath = stem.with_suffix(".json"), stem.with_suffix(".safetensors")
    raw = read_hooked_config(checkpoint_path)
    if not wpath.is_file():
        what = "is not a regular file" if os.path.lexists(wpath) else "does not exist"
        raise CheckpointLoadError(f"checkpoint weights {wpath} {what}")
    cfg = _bridge_config(raw, side, device)
    if str(cfg.act_fn or "").lower() == "relu2":
        _register_relu2()
    try:
        weights = load_file(str(wpath))
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise CheckpointLoadError(f"{wpath} cannot be read as safetensors: "
                                  f"{str(e)[:200]}") from None
    state = {k.removeprefix("model."): v for k, v in weights.items() if k.startswith("model.")}
    if not state:
        raise CheckpointLoadError(f"{wpath} holds no model.* weights (not a mechinterp_icr "
                                  "checkpoint)")
    try:
        converted = convert_tl_checkpoint(state, cfg)
    except ValueError as e:
        raise CheckpointLoadError(f"{wpath}: {str(e)[:300]}") from None
    with torch.random.fork_rng(devices=[]):  # the random init must not move the caller's RNG
        try:
            bridge = TransformerBridge.boot_native(cfg, device=cfg.device, dtype=cfg.dtype)
        except ValueError as e:
            raise CheckpointLoadError(f"{side}: TransformerLens 4 cannot build this model: "
                                      f"{str(e)[:300]}") from None
    try:
        bridge.load_state_dict(converted, strict=True)
    except RuntimeError as e:
        raise CheckpointLoadError(f"{wpath} does not match its sidecar's config: "
                                  f"{str(e)[:300]}") from None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # its notes on legacy hook aliases
        bridge.enable_compatibility_mode(no_processing=True, disable_warnings=True)
    bridge.eval()
    _warn_attn_scores_once()
    return bridge


def _tl_major() -> int | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return int(version("transformer_lens").split(".")[0])
    except (PackageNotFoundError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint", help="STEM, STEM.json or STEM.safetensors")
    ap.add_argument("--device", default=None, help="torch device [default: cpu]")
    args = ap.parse_args(argv)
    # a missing or foreign file is said before torch is imported
    try:
        read_hooked_config(args.checkpoint)
    except CheckpointLoadError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    major = _tl_major()
    if major is None or major < 4:
        print(f"error: {sys.argv[0]} needs TransformerLens 4 (installed: "
              f"{'none' if major is None else major}.x); for TransformerLens 3 use "
              "mechinterp_icr.load or README's TransformerLens-only snippet", file=sys.stderr)
        return 2
    import torch

    try:
        bridge = load_bridge(args.checkpoint, device=args.device)
    except CheckpointLoadError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    n_ctx, d_vocab = bridge.cfg.n_ctx, bridge.cfg.d_vocab
    tokens = (torch.arange(n_ctx) % d_vocab).unsqueeze(0).to(args.device or "cpu")
    with torch.no_grad():
        logits = bridge(tokens)
    print(f"{_stem(args.checkpoint)}: logits shape {tuple(logits.shape)} "
          f"(batch, position, vocabulary), act_fn {bridge.cfg.act_fn}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
