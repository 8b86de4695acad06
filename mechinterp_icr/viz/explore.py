"""Checkpoint explorer: one offline HTML page per run (``icr explore``).

A slider over the selected checkpoints shows, for one prompt:

- the circuitsvis attention of every head (``AttentionHeads``, heads named ``L{l}H{h}``),
  rendered from the circuitsvis bundle inlined into the page (no network);
- the model's prediction at the prompt's last position beside the correct answer;
- the head-role table: per head, the attention mass from the prediction position onto token
  roles, averaged over a batch of held-out prompts (CR: demo subjects, demo attributes,
  grammar, separators, query subject, BOS; other tasks: the position itself, the previous
  token, the first token, induction targets, the rest);
- training-dynamics curves with the current checkpoint marked: the run's own logged metrics
  (``metrics.jsonl``: for an IR run IR-4's attention row ``row1 s1`` .. ``row1 s_q`` and
  the accuracies), and
  for a CR run the CR-7 OV and KQ probes of the layer-0 heads computed at every selected
  checkpoint.

Everything is computed when the page is written; the page holds numbers, not models. Opening
it with ``#ck=N`` in the URL moves the slider to checkpoint N (the same code path as dragging
it), which is how the browser test drives it.
"""

from __future__ import annotations

import html
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mechinterp_icr.config import ConfigError, check_range
from mechinterp_icr.store.io import atomic_write_text
from mechinterp_icr.tasks.base import IGNORE

__all__ = ["explore_run", "explore_html", "MAX_CHECKPOINTS"]

MAX_CHECKPOINTS = 400  # patterns of every head at every checkpoint are stored in the page
GENERIC_ROLES = ("self", "previous", "first", "induction", "other")


def _prompt(task, run_seed: int, seed: int, prompt: str | None, n_ctx: int):
    """(tokens (T,), prediction position, correct answer id or None, description). Prompt
    seed N shows example N of the run's fixed example set: the prompt `icr view --example N`
    shows (``views.example_prompt``)."""
    if prompt is not None:
        if not prompt.split():
            raise ConfigError("--prompt = '' is not allowed; expected space-separated tokens")
        try:
            ids = task.vocab.encode(prompt)
        except ValueError as e:
            raise ConfigError(f"--prompt = {prompt!r} is not allowed: {e}") from None
        if len(ids) > n_ctx:
            raise ConfigError(f"--prompt has {len(ids)} tokens; expected at most "
                              f"model.n_ctx = {n_ctx}")
        return torch.tensor(ids), len(ids) - 1, None, "the given prompt"
    from mechinterp_icr.viz.views import example_prompt

    toks, answer = example_prompt(task, run_seed, seed)
    what = "held-out ICL prompt" if hasattr(task, "sample_icl") else "held-out example"
    return toks, toks.numel() - 1, answer, f"{what} (prompt seed {seed}: icr view --example {seed})"


def _role_batch(task, seed: int, n: int):
    """A batch of held-out prompts and each one's prediction position for the role table."""
    from mechinterp_icr.training.loop import batch_rng

    rng = batch_rng(seed, "explore-roles", 0)
    if hasattr(task, "sample_icl"):
        b = task.sample_icl(rng, n, subjects=getattr(task, "heldout_subjects", None))
        return b, torch.as_tensor(b.meta["query_pos"]).long()
    b = task.sample(rng, n, "eval")
    has = b.targets != IGNORE
    last = torch.where(has.any(1), (has.long() * torch.arange(has.shape[1])).argmax(1),
                       torch.full((has.shape[0],), has.shape[1] - 1))
    return b, last


def _generic_roles(pats: torch.Tensor, tokens: torch.Tensor, qp: torch.Tensor):
    """{role: (L, H)} mass from ``qp`` on the position itself, the previous token, the first
    token, induction targets (the token after an earlier copy of the current token) and the
    rest; the roles partition the row (one position may count once, in this order)."""
    B, L, H, T, _ = pats.shape
    rows = pats[torch.arange(B), :, :, qp]  # (B, L, H, T)
    pos = torch.arange(T)[None]
    masks = {"self": pos == qp[:, None], "previous": pos == (qp - 1)[:, None],
             "first": pos == 0}
    cur = tokens[torch.arange(B), qp]
    earlier = (tokens == cur[:, None]) & (pos < qp[:, None])
    ind = torch.zeros_like(earlier)
    ind[:, 1:] = earlier[:, :-1]
    masks["induction"] = ind & (pos <= qp[:, None])
    taken = torch.zeros_like(earlier)
    out = {}
    for name, m in masks.items():
        m = m.expand(B, T) & ~taken
        taken |= m
        out[name] = (rows * m[:, None, None].float()).sum(-1).mean(0)
    out["other"] = (rows * (~taken)[:, None, None].float()).sum(-1).mean(0)
    return out


@torch.no_grad()
def _head_roles(model, task, batch, qp) -> tuple[list[str], list[list[float]]]:
    """(role names, one row of masses per head in L{l}H{h} order)."""
    from mechinterp_icr.interp.attention import ROLE_GROUPS, attention_patterns, role_masses

    pats = attention_patterns(model, batch.tokens)
    if "roles" in batch.meta:
        groups = {g: c for g, c in ROLE_GROUPS.items() if g != "pad"}
        masses = role_masses(pats, batch.meta["roles"], qp, groups)
        names = list(groups)
    else:
        masses = _generic_roles(pats, batch.tokens, qp)
        names = list(GENERIC_ROLES)
    L, H = model.cfg.n_layers, model.cfg.n_heads
    return names, [[round(float(masses[g][l, h]), 4) for g in names]
                   for l in range(L) for h in range(H)]


def _logged_curves(run) -> dict[str, dict[str, list[list[float]]]]:
    """phase -> metric -> [[step, value], ...] from ``metrics.jsonl`` (numbers; a list such as
    IR's ``row1`` becomes ``row1 s1``, ``row1 a1``, ..., see :func:`_list_names`)."""
    out: dict[str, dict[str, list[list[float]]]] = {}
    for rec in run.read_metrics():
        phase, step = rec.get("phase"), rec.get("step")
        if not isinstance(phase, str) or not isinstance(step, int):
            continue
        for k, v in rec.items():
            if k in ("phase", "step", "lr"):
                continue
            vals = {k: v} if not isinstance(v, list) else dict(zip(_list_names(k, len(v)),
                                                                    v[:16]))
            for name, x in vals.items():
                if isinstance(x, (int, float)) and not isinstance(x, bool) \
                        and math.isfinite(x):
                    out.setdefault(phase, {}).setdefault(name, []).append([step, float(x)])
    for series in out.values():
        for pts in series.values():
            pts.sort()
    return out


def _list_names(key: str, n: int) -> list[str]:
    """Names of a logged list's entries: IR's ``row1`` (the step-1 attention row over
    s1 a1 .. sK aK s_q) by position, anything else by index."""
    if key == "row1" and n >= 3:
        return [f"row1 {'s' if i % 2 == 0 else 'a'}{i // 2 + 1}" for i in range(n - 1)] + \
            ["row1 s_q"]
    return [f"{key}[{i}]" for i in range(n)]


def _curve_groups(kind: str | None, metric_names: list[str], n_heads: int,
                  mechanism: bool = False) -> list[dict]:
    """The curve menu, the first entry shown when the page opens: the paper's
    training-dynamics view that fits the model (CR-7's probes for a one-layer model such as the
    mechanism model, whose layer-0 heads become the Relation and Subject heads; held-out
    accuracy first for a deeper model such as the main CR model, on which those layer-0 probes
    stay flat), then one entry per metric."""
    groups = []
    cr7 = None
    if kind == "cr":
        keys = [f"CR-7 {p} probe L0H{h}" for h in range(n_heads) for p in ("OV", "KQ")]
        cr7 = {"label": "CR-7: OV and KQ probes (layer-0 heads"
                        + ("" if mechanism else "; the mechanism model's view") + ")",
               "keys": [k for k in keys if k in metric_names], "y": "probe value (0 to 1)"}
        if mechanism:
            groups.append(cr7)
    if kind == "ir" or any(k.startswith("row1") for k in metric_names):
        groups.append({"label": "IR-4: step-1 attention row (query s_q)",
                       "keys": [k for k in metric_names if k.startswith("row1")],
                       "y": "attention weight"})
    accs = [k for k in metric_names if k in ("heldout_icl_exact", "step1_acc", "step2_acc",
                                             "eval_acc", "heldout_iclgrm_exact", "pt_typed")]
    if accs:
        groups.append({"label": "held-out accuracy", "keys": accs, "y": "accuracy"})
    if cr7 is not None and not mechanism:
        groups.append(cr7)
    groups = [g for g in groups if g["keys"]]
    groups += [{"label": k, "keys": [k], "y": k} for k in metric_names]
    return groups


def _cr7_probes(task, seed: int):
    """fn(model) -> {'CR-7 OV probe L0H{h}', 'CR-7 KQ probe L0H{h}'} for a CR run."""
    from mechinterp_icr.interp.ovkq import checkpoint_probes
    from mechinterp_icr.training.loop import batch_rng

    batch = task.sample_icl(batch_rng(seed, "explore-cr7", 0), 64,
                            subjects=task.heldout_subjects)
    fn = checkpoint_probes(task, batch)

    def probes(model) -> dict[str, float]:
        r = fn(model)
        out = {}
        for h in range(model.cfg.n_heads):
            out[f"CR-7 OV probe L0H{h}"] = float(r[f"h{h}_ov"])
            out[f"CR-7 KQ probe L0H{h}"] = float(r[f"h{h}_kq"])
        return out

    return probes


def _progress(items, desc: str):
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return items
    return tqdm(items, desc=desc, file=sys.stderr, leave=False, disable=None)


@torch.no_grad()
def explore_data(run_path: str | Path, selection: str = "all", prompt_seed: int = 0,
                 prompt: str | None = None, n_roles: int = 64, heads: str = "all"
                 ) -> dict[str, Any]:
    """Everything the page shows, as JSON-ready numbers (see the module docstring); ``heads``
    (``all`` or ``LxHy`` joined by commas) narrows the attention patterns and the role table
    to those heads."""
    from mechinterp_icr.models.factory import head_name, parse_heads
    from mechinterp_icr.pipeline import load_run_model
    from mechinterp_icr.store.rundir import RunDir, RunError
    from mechinterp_icr.viz.views import MAX_EXAMPLE

    check_range("--prompt-seed", prompt_seed, 0, MAX_EXAMPLE - 1, integer=True)
    check_range("--roles-n", n_roles, 1, 100_000, integer=True)
    run = RunDir(run_path)
    cfg, task, build = load_run_model(run)
    cks = run.select(selection)
    if len(cks) > MAX_CHECKPOINTS:
        raise RunError(f"--checkpoints {selection!r} selects {len(cks)} checkpoints; the page "
                       f"holds at most {MAX_CHECKPOINTS}: narrow it (e.g. phase:NAME, "
                       "steps:A-B, or names joined by commas)")
    kind = getattr(type(cfg.task), "kind", None)
    toks, qp, answer, what = _prompt(task, cfg.seed, prompt_seed, prompt, cfg.model.n_ctx)
    rbatch, rqp = _role_batch(task, prompt_seed, n_roles)
    cr7 = _cr7_probes(task, prompt_seed) if kind == "cr" else None
    L, H = cfg.model.n_layers, cfg.model.n_heads
    chosen = parse_heads(heads, L, H)
    rows = [l * H + h for l, h in chosen]  # patterns and role rows are layer-major
    entries, computed = [], {}
    role_names: list[str] = []
    for ck, model in _progress(run.iter_models(",".join(c.name for c in cks), build),
                               "explore"):
        dev = next(model.parameters()).device
        logits, cache = model.run_with_cache(toks[None].to(dev),
                                             names_filter=lambda n: n.endswith("hook_pattern"))
        pats = torch.cat([cache[f"blocks.{l}.attn.hook_pattern"][0] for l in range(L)], 0)[rows]
        probs = torch.softmax(logits[0, qp].float(), -1)
        top = int(probs.argmax())
        role_names, roles = _head_roles(model, task, rbatch, rqp)
        entry = {"name": ck.name, "phase": ck.phase, "step": ck.step,
                 "attention": np.round(pats.cpu().numpy().astype(float), 3).tolist(),
                 "prediction": task.vocab.tokens([top])[0], "p_prediction": float(probs[top]),
                 "roles": [roles[i] for i in rows]}
        if answer is not None:
            entry["p_answer"] = float(probs[answer])
        if cr7 is not None:
            for k, v in cr7(model).items():
                computed.setdefault(ck.phase, {}).setdefault(k, []).append([ck.step, v])
        entries.append(entry)
    curves = _logged_curves(run)
    for phase, series in computed.items():
        curves.setdefault(phase, {}).update(series)
    names = sorted({k for s in curves.values() for k in s},
                   key=lambda k: (not k.startswith("CR-7"), k))
    return {
        "run": str(run.path), "kind": kind, "selection": selection, "prompt_desc": what,
        "tokens": task.vocab.tokens(toks.tolist()), "position": qp,
        "answer": None if answer is None else task.vocab.tokens([answer])[0],
        "head_names": [head_name(l, h) for l, h in chosen],
        "role_names": role_names, "role_n": n_roles, "checkpoints": entries,
        "curves": curves, "curve_groups": _curve_groups(kind, names, H, mechanism=L == 1),
    }


def explore_html(data: dict[str, Any]) -> str:
    """The page for :func:`explore_data`'s numbers, with the circuitsvis bundle inlined."""
    from mechinterp_icr.viz.views import bundle_source

    payload = json.dumps(data, separators=(",", ":")).replace("</", "<\\/")
    bundle = bundle_source().replace("</script", "<\\/script")
    title = f"checkpoint explorer: {data['run']}"
    return (_PAGE.replace("__TITLE__", html.escape(title))
            .replace("__BUNDLE__", bundle).replace("__DATA__", payload)
            .replace("__SCRIPT__", _SCRIPT))


def explore_run(run: str | Path, selection: str = "all", out: str | Path | None = None,
                prompt_seed: int = 0, prompt: str | None = None, n_roles: int = 64,
                heads: str = "all") -> Path:
    """Write the explorer page of ``run`` (default ``RUN/analyses/explore.html``)."""
    if out is not None and Path(out).suffix.lower() not in (".html", ".htm"):
        raise ConfigError(f"--out = {str(out)!r} is not allowed; expected a file name ending "
                          "in .html")
    data = explore_data(run, selection, prompt_seed, prompt, n_roles, heads)
    from mechinterp_icr.store.rundir import RunDir

    path = Path(out) if out is not None else RunDir(run).analyses_dir / "explore.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, explore_html(data))


_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>__TITLE__</title>
<style>
body { font-family: sans-serif; margin: 16px 24px; color: #222; }
h2 { font-size: 20px; margin: 0 0 6px 0; }
h3 { font-size: 16px; margin: 14px 0 6px 0; }
.muted { color: #666; font-size: 13px; }
#controls { display: flex; align-items: center; gap: 12px; margin: 10px 0; flex-wrap: wrap; }
#ck-slider { width: 420px; }
#ck-name { font-weight: bold; font-family: monospace; font-size: 15px; }
#prompt span.tok { font-family: monospace; padding: 1px 3px; margin: 1px; background: #f0f0f0;
  border-radius: 3px; display: inline-block; }
#prompt span.last { background: #ffe08a; }
#pred { font-size: 15px; margin: 6px 0; }
.ok { color: #1a7f37; font-weight: bold; } .bad { color: #c62828; font-weight: bold; }
#panels { display: flex; gap: 28px; flex-wrap: wrap; align-items: flex-start; }
#attention-panel { width: 540px; flex: 0 0 540px; }
table.roles { border-collapse: collapse; font-size: 13px; }
table.roles th, table.roles td { border: 1px solid #ccc; padding: 3px 7px; text-align: right; }
table.roles th { background: #f4f4f4; }
table.roles td.top { background: #dbe9ff; font-weight: bold; }
#side-panel { width: 580px; flex: 0 0 580px; }
#curve-note { max-width: 560px; }
#curve-svg { border: 1px solid #ddd; background: #fff; }
</style></head>
<body>
<h2>__TITLE__</h2>
<div class="muted" id="meta"></div>
<div id="controls">
  <button id="prev">&larr;</button>
  <input type="range" id="ck-slider" min="0" max="0" value="0" step="1">
  <button id="next">&rarr;</button>
  <span id="ck-name"></span> <span class="muted" id="ck-pos"></span>
</div>
<div id="prompt"></div>
<div id="pred"></div>
<div id="panels">
  <div id="attention-panel"><h3>attention of every head on this prompt</h3>
    <div class="muted">hover a head thumbnail to enlarge it; rows are query positions,
    columns key positions</div>
    <div id="attention-holder"></div></div>
  <div id="side-panel"><h3>head roles</h3><div class="muted" id="roles-note"></div>
    <table class="roles" id="roles-table"></table>
    <h3>training dynamics</h3>
    <select id="curve-select"></select>
    <div class="muted" id="curve-note"></div>
    <svg id="curve-svg" width="560" height="300"></svg></div>
</div>
<script>__BUNDLE__</script>
<script>const EXPLORE = __DATA__;</script>
<script>__SCRIPT__</script>
</body></html>
"""

_SCRIPT = r"""
(function () {
  const D = EXPLORE, cks = D.checkpoints;
  const slider = document.getElementById("ck-slider");
  const esc = s => String(s).replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;",
    ">": "&gt;", '"': "&quot;"}[c]));
  slider.max = cks.length - 1;
  document.getElementById("meta").textContent = "task " + D.kind + " | " + D.prompt_desc +
    " | checkpoints: " + D.selection + " (" + cks.length + ")";
  document.getElementById("prompt").innerHTML = "prompt: " + D.tokens.map((t, i) =>
    '<span class="tok' + (i === D.position ? ' last' : '') + '">' + esc(t) + '</span>').join("");
  document.getElementById("roles-note").textContent = "attention mass from the prediction " +
    "position onto token roles, mean over " + D.role_n + " held-out prompts";
  const sel = document.getElementById("curve-select");
  D.curve_groups.forEach((g, i) => { const o = document.createElement("option");
    o.value = i; o.textContent = g.label; sel.appendChild(o); });
  let counter = 0;

  function drawAttention(ck) {
    const holder = document.getElementById("attention-holder");
    holder.innerHTML = "";
    const div = document.createElement("div");
    div.id = "attn-" + (counter++);
    div.setAttribute("data-checkpoint", ck.name);
    holder.appendChild(div);
    CircuitsVis.render(div.id, CircuitsVis.AttentionHeads, {attention: ck.attention,
      tokens: D.tokens, attentionHeadNames: D.head_names});
  }

  function drawRoles(ck) {
    let h = "<tr><th>head</th>" + D.role_names.map(r => "<th>" + esc(r.replace(/_/g, " ")) +
      "</th>").join("") + "</tr>";
    ck.roles.forEach((row, i) => {
      const m = Math.max.apply(null, row);
      h += "<tr><th>" + D.head_names[i] + "</th>" + row.map(v => '<td' +
        (v === m ? ' class="top"' : '') + '>' + v.toFixed(3) + "</td>").join("") + "</tr>";
    });
    document.getElementById("roles-table").innerHTML = h;
  }

  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                  "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"];
  // The x axis spans every checkpoint of the current phase on the slider (and every logged
  // point of the shown series), so the dashed current-step line is always inside it; the
  // end steps are labelled. Points are marked, so a series of one point is visible, and the
  // note says why a curve has one point or none.
  function drawCurves(ck) {
    const svg = document.getElementById("curve-svg"), W = 560, Hh = 300;
    const g = D.curve_groups[+sel.value || 0];
    const series = D.curves[ck.phase] || {};
    const keys = g ? g.keys.filter(k => series[k] && series[k].length) : [];
    const note = document.getElementById("curve-note");
    const onSlider = cks.filter(c => c.phase === ck.phase).map(c => c.step);
    const cr7 = g && g.keys.some(k => k.startsWith("CR-7"));
    if (!keys.length) {
      const why = cr7 ? "the CR-7 probes are computed only for CR runs, at the selected " +
        "checkpoints; phase " + ck.phase + " has none" : "no curve of this kind was " +
        "logged in phase " + ck.phase;
      svg.innerHTML = '<text id="curve-empty" x="20" y="40" font-size="13">' + esc(why) +
        '</text>';
      note.textContent = ""; return;
    }
    let steps = onSlider.slice(), vals = [];
    keys.forEach(k => series[k].forEach(p => { steps.push(p[0]); vals.push(p[1]); }));
    steps.push(ck.step);
    const smin = Math.min.apply(null, steps), smax = Math.max.apply(null, steps);
    const logx = smax - smin > 20 && smax > 20;
    const fx = s => logx ? Math.log10(s + 1) : s;
    let x0 = fx(smin), x1 = fx(smax);
    if (x1 - x0 < 1e-9) { const pad = logx ? 0.3 : 1; x0 -= pad; x1 += pad; }
    let y0 = Math.min(0, Math.min.apply(null, vals)), y1 = Math.max.apply(null, vals);
    if (y1 <= 1.0 && y0 >= 0) y1 = 1.0;
    if (y1 - y0 < 1e-9) y1 = y0 + 1;
    const L = 55, R = 150, T = 12, B = 42;
    const px = s => L + (fx(s) - x0) / (x1 - x0) * (W - L - R);
    const py = v => Hh - B - (v - y0) / (y1 - y0) * (Hh - T - B);
    let s = '<line id="x-axis" x1="' + L + '" y1="' + (Hh - B) + '" x2="' + (W - R) +
      '" y2="' + (Hh - B) + '" stroke="#444"/><line x1="' + L + '" y1="' + T + '" x2="' + L +
      '" y2="' + (Hh - B) + '" stroke="#444"/>';
    for (let i = 0; i <= 4; i++) { const v = y0 + (y1 - y0) * i / 4;
      s += '<text x="' + (L - 6) + '" y="' + (py(v) + 4) + '" font-size="11" ' +
        'text-anchor="end">' + v.toPrecision(2) + '</text>'; }
    let ticks = [];
    if (logx) [0, 1, 3, 10, 30, 100, 300, 1000, 3000, 10000, 30000, 100000, 300000]
      .forEach(t => { if (t > smin && t < smax) ticks.push(t); });
    else for (let i = 1; i < 4; i++) ticks.push(Math.round(smin + (smax - smin) * i / 4));
    // the end steps always; an inner tick too close to one (in pixels) is dropped
    ticks = ticks.filter(t => Math.abs(px(t) - px(smin)) > 28 && Math.abs(px(t) - px(smax)) > 28);
    ticks = [smin].concat(ticks, smax > smin ? [smax] : []);
    ticks.forEach(t => {
      s += '<line x1="' + px(t) + '" x2="' + px(t) + '" y1="' + (Hh - B) + '" y2="' +
        (Hh - B + 4) + '" stroke="#444"/><text class="x-tick" x="' + px(t) + '" y="' +
        (Hh - B + 15) + '" font-size="11" text-anchor="middle">' + t + '</text>'; });
    s += '<text x="' + ((L + W - R) / 2) + '" y="' + (Hh - 6) + '" font-size="12" ' +
      'text-anchor="middle">step in phase ' + esc(ck.phase) + (logx ? ' (log scale)' : '') +
      '</text>';
    s += '<text x="14" y="' + ((T + Hh - B) / 2) + '" font-size="12" text-anchor="middle" ' +
      'transform="rotate(-90 14 ' + ((T + Hh - B) / 2) + ')">' +
      esc(g.y || (keys.length === 1 ? keys[0] : "value")) + '</text>';
    const notes = [];
    keys.forEach((k, i) => { const c = COLORS[i % COLORS.length], pts = series[k];
      s += '<polyline fill="none" stroke="' + c + '" stroke-width="1.8" points="' +
        pts.map(p => px(p[0]).toFixed(1) + "," + py(p[1]).toFixed(1)).join(" ") + '"/>';
      if (pts.length <= 60) pts.forEach(p => { s += '<circle cx="' + px(p[0]).toFixed(1) +
        '" cy="' + py(p[1]).toFixed(1) + '" r="2.6" fill="' + c + '"/>'; });
      s += '<text x="' + (W - R + 8) + '" y="' + (T + 14 * (i + 1)) + '" font-size="11" ' +
        'fill="' + c + '">' + esc(k) + '</text>';
      const last = pts[pts.length - 1][0];
      if (last < ck.step && !notes.some(n => n.startsWith("logged")))
        notes.push("logged up to step " + last + " in this phase"); });
    s += '<line id="current-step" x1="' + px(ck.step) + '" x2="' + px(ck.step) + '" y1="' + T +
      '" y2="' + (Hh - B) + '" stroke="#000" stroke-dasharray="4,3"/>';
    svg.innerHTML = s;
    if (keys.every(k => series[k].length === 1))
      notes.unshift(cr7 ? "one point: the CR-7 probes are computed at the selected " +
        "checkpoints and phase " + ck.phase + " has one on the slider (select more, " +
        "e.g. --checkpoints all, for a curve)" : "one point: logged once in phase " +
        ck.phase);
    note.textContent = "dashed line: the current checkpoint (step " + ck.step + ")" +
      (notes.length ? "; " + notes.join("; ") : "");
  }

  function show(i) {
    i = Math.max(0, Math.min(cks.length - 1, i | 0));
    const ck = cks[i];
    slider.value = i;
    document.getElementById("ck-name").textContent = ck.name;
    document.getElementById("ck-pos").textContent = "(" + (i + 1) + " of " + cks.length +
      "; phase " + ck.phase + ", step " + ck.step + ")";
    let p = "prediction at the last position: <b>" + esc(ck.prediction) + "</b> (p = " +
      ck.p_prediction.toFixed(3) + ")";
    if (D.answer !== null) {
      const ok = ck.prediction === D.answer;
      p += " &nbsp; correct answer: <b>" + esc(D.answer) + "</b> (p = " +
        ck.p_answer.toFixed(3) + ") <span class='" + (ok ? "ok'>&#10003; right" :
        "bad'>&#10007; wrong") + "</span>";
    }
    document.getElementById("pred").innerHTML = p;
    document.body.setAttribute("data-current", ck.name);
    document.body.setAttribute("data-attention-sum", ck.attention.map(h => h.map((r, q) =>
      r.reduce((a, v, k) => a + v * (k + 1) * (q + 1), 0)).reduce((a, b) => a + b, 0))
      .reduce((a, b) => a + b, 0).toFixed(4));
    drawAttention(ck); drawRoles(ck); drawCurves(ck);
  }

  slider.addEventListener("input", () => show(+slider.value));
  sel.addEventListener("change", () => show(+slider.value));
  document.getElementById("prev").onclick = () => show(+slider.value - 1);
  document.getElementById("next").onclick = () => show(+slider.value + 1);
  const m = /ck=(-?\d+)/.exec(location.hash);
  show(0);
  if (m) { let n = +m[1]; if (n < 0) n = cks.length + n;
    slider.value = n; slider.dispatchEvent(new Event("input")); }
})();
"""
