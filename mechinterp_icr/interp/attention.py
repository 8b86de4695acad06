"""Attention extraction and role summaries.

For every head, the attention mass from the prediction position (``meta["query_pos"]``) onto
token roles, using the per-position role codes a task puts in ``meta["roles"]`` (CR:
``tasks.cr.ROLES``). Role groups (``ROLE_GROUPS``) partition the positions, so the masses of a
head sum to 1 (tested). Also generic attention rows at a query position, which is what the
pairwise-pattern measurements of IR need.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = [
    "ROLE_GROUPS",
    "attention_patterns",
    "attention_row",
    "head_role_table",
    "role_masses",
    "roles_figure",
    "roles_over_checkpoints",
]

# role group -> role codes of tasks.cr.ROLES (the groups partition every role)
ROLE_GROUPS: dict[str, tuple[int, ...]] = {
    "demo_subject": (3,),
    "demo_attribute": (5,),
    "grammar": (4, 7),
    "separator": (2,),
    "query_subject": (6,),
    "bos": (1,),
    "pad": (0,),
}


@torch.no_grad()
def attention_patterns(model, tokens: torch.Tensor, layers: Sequence[int] | None = None,
                       batch_size: int = 512) -> torch.Tensor:
    """Patterns (B, n_layers_sel, heads, T, T) on the CPU."""
    layers = list(range(model.cfg.n_layers)) if layers is None else list(layers)
    names = {f"blocks.{l}.attn.hook_pattern" for l in layers}
    dev = next(model.parameters()).device
    out = []
    for i in range(0, tokens.shape[0], batch_size):
        _, cache = model.run_with_cache(tokens[i:i + batch_size].to(dev),
                                        names_filter=lambda n: n in names)
        out.append(torch.stack([cache[f"blocks.{l}.attn.hook_pattern"] for l in layers],
                               1).cpu())
    return torch.cat(out, 0)


@torch.no_grad()
def attention_row(model, tokens: torch.Tensor, layer: int, head: int, query_pos) -> torch.Tensor:
    """Each example's attention row (B, T) of head ``(layer, head)`` at ``query_pos``."""
    pat = attention_patterns(model, tokens, [layer])[:, 0, head]  # (B, T, T)
    B = pat.shape[0]
    qp = torch.as_tensor(query_pos).long()
    if qp.dim() == 0:
        qp = qp.expand(B)
    return pat[torch.arange(B), qp]


def role_masses(patterns: torch.Tensor, roles: torch.Tensor, query_pos: torch.Tensor,
                groups: dict[str, tuple[int, ...]] = ROLE_GROUPS) -> dict[str, torch.Tensor]:
    """Mean attention mass per role group from the query position.

    ``patterns`` (B, L, H, T, T), ``roles`` (B, T) role codes, ``query_pos`` (B,).
    Returns ``{group: (L, H)}``; a role not covered by ``groups`` goes to ``"other"``."""
    B = patterns.shape[0]
    rows = patterns[torch.arange(B), :, :, query_pos.long()]  # (B, L, H, T)
    out = {}
    covered = torch.zeros_like(roles, dtype=torch.bool)
    for g, codes in groups.items():
        m = torch.isin(roles, torch.as_tensor(codes))
        covered |= m
        out[g] = (rows * m[:, None, None, :].float()).sum(-1).mean(0)
    out["other"] = (rows * (~covered)[:, None, None, :].float()).sum(-1).mean(0)
    return out


@torch.no_grad()
def head_role_table(model, batch, groups: dict[str, tuple[int, ...]] = ROLE_GROUPS) -> list[dict]:
    """One row per head: ``{"layer", "head", <group>: mass, "top_role"}`` at the query."""
    pats = attention_patterns(model, batch.tokens)
    masses = role_masses(pats, batch.meta["roles"], batch.meta["query_pos"], groups)
    rows = []
    for l in range(model.cfg.n_layers):
        for h in range(model.cfg.n_heads):
            r = {"layer": l, "head": h}
            r.update({g: float(v[l, h]) for g, v in masses.items()})
            named = {g: r[g] for g in groups if g not in ("pad",)}
            r["top_role"] = max(named, key=named.get)
            rows.append(r)
    return rows


def roles_over_checkpoints(run, selection: str, batch) -> list[dict]:
    """``head_role_table`` for every selected checkpoint (one model in memory at a time)."""
    from mechinterp_icr.interp.cache import map_checkpoints

    out = []
    for row in map_checkpoints(run, selection,
                               lambda ck, m: {"heads": head_role_table(m, batch)}):
        for h in row.pop("heads"):
            out.append({**row, **h})
    return out


def roles_figure(rows: list[dict], title: str = "attention from the query by role"):
    """Plotly figure of ``roles_over_checkpoints`` rows: one panel line per (head, role)
    against the checkpoint order."""
    import plotly.graph_objects as go

    fig = go.Figure()
    names = list(dict.fromkeys(r["checkpoint"] for r in rows))
    heads = sorted({(r["layer"], r["head"]) for r in rows})
    for l, h in heads:
        sel = [r for r in rows if (r["layer"], r["head"]) == (l, h)]
        for g in ("demo_attribute", "query_subject", "demo_subject", "separator", "grammar"):
            fig.add_scatter(x=[r["checkpoint"] for r in sel], y=[r[g] for r in sel],
                            mode="lines+markers", name=f"L{l}H{h} {g}")
    fig.update_layout(title=title, xaxis_title="checkpoint", yaxis_title="attention mass",
                      yaxis_range=[0, 1.02], xaxis={"categoryorder": "array",
                                                    "categoryarray": names})
    return fig
