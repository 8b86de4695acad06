"""viz.step_figures: a metric against training step with the phases in sequence (PT, then
finetuning from PT's last step), one line per series and group, titled axes, hover naming the
checkpoint; the figure is not blank."""

from mechinterp_icr.viz.step_figures import phase_offsets, step_figure, wrap_title


def _rows():
    rows = []
    for phase, steps in (("pretrain", (0, 100, 300)), ("ft-icl", (0, 2, 80))):
        for s in steps:
            for layer, v in (("L0_out", 0.1 + s / 1000), ("L1_out", 0.2 + s / 500)):
                rows.append({"checkpoint": f"{phase}-{s:07d}", "phase": phase, "step": s,
                             "layer": layer, "p": v, "bad": None})
    return rows


def test_phases_follow_each_other_on_the_step_axis():
    rows = _rows()
    assert phase_offsets(rows) == {"pretrain": 0, "ft-icl": 300}
    fig = step_figure(rows[5:] + rows[:6], {"answer probability": "p", "nothing": "bad"},
                      "Logit lens against training step (run cr, all (6 checkpoints))",
                      "answer probability", group="layer").to_dict()
    data, layout = fig["data"], fig["layout"]
    assert [t["name"] for t in data] == ["L1_out answer probability",
                                        "L0_out answer probability"]
    for t in data:  # sorted, each checkpoint once, finetuning after PT
        assert list(t["x"]) == [0, 100, 300, 300, 302, 380]
        assert all(isinstance(y, float) for y in t["y"]) and len(set(t["y"])) > 1
        assert t["customdata"][-1][0] == "ft-icl-0000080"
    assert "phases in sequence" in layout["xaxis"]["title"]["text"]
    assert "ft-icl from 300" in layout["xaxis"]["title"]["text"]
    assert layout["yaxis"]["title"]["text"] == "answer probability"
    assert layout["title"]["text"].startswith("Logit lens against training step")
    assert [s["x0"] for s in layout["shapes"]] == [0, 300]  # where each phase starts
    assert {a["text"] for a in layout["annotations"]} == {"pretrain →", "ft-icl →"}


def test_long_titles_get_a_second_line():
    assert wrap_title("short (x)") == "short (x)"
    long = "A" * 80 + " (run cr, all (21 checkpoints), 128 prompts)"
    assert wrap_title(long) == ("A" * 80
                                + "<br><sup>(run cr, all (21 checkpoints), 128 prompts)</sup>")
