"""notebooks/quickstart.ipynb runs top to bottom (nbclient, a fresh kernel) and is committed
without outputs."""

import json
import os
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "quickstart.ipynb"


def test_the_committed_notebook_has_no_outputs():
    nb = json.loads(NOTEBOOK.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    assert code
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code)


@pytest.mark.slow  # about 60 s on 2 cores: the slow step runs it
def test_the_quickstart_notebook_runs(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    monkeypatch.setenv("QUICKSTART_OUT", str(tmp_path))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                     for o in c.get("outputs", []) if o.get("output_type") == "stream")
    assert "heldout_icl_exact" in text and "started from" in text  # icr train, icr eval
    assert "prediction at the query" in text and "recovery" in text
    assert "top singular values" in text and "ov_precision" in text  # OV / QK circuits
    assert "probe accuracy" in text
    assert any((tmp_path / "ft" / "checkpoints").glob("ft-icl-*.safetensors"))
    assert (tmp_path / "explore.html").stat().st_size > 100_000  # the explorer page
    assert os.environ["QUICKSTART_OUT"] == str(tmp_path)
