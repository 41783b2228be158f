"""notebooks/inspect_heads.ipynb runs headless, training its own tiny model or opening $MIXIT_CHECKPOINT.

The kernel is "python3", which jupyter_client starts with the interpreter running the tests; PYTHONPATH
points it at this repository, and a probe cell appended to the notebook checks both.
"""

import os
import re
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from mixit_lab.analysis.heads import COLUMNS
from mixit_lab.models import ModelConfig, build_model

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "notebooks" / "inspect_heads.ipynb"
PROBE = "import sys, models; print('PROBE', sys.prefix, '|', models.__file__)"


def _execute(tmp_path, monkeypatch, checkpoint: Path | None = None) -> nbformat.NotebookNode:
    """Run the notebook (plus the probe cell) in tmp_path; a failing cell raises CellExecutionError."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # the self-trained run goes here, and must be gone afterwards
    if checkpoint is None:
        monkeypatch.delenv("MIXIT_CHECKPOINT", raising=False)
    else:
        monkeypatch.setenv("MIXIT_CHECKPOINT", str(checkpoint))
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    NotebookClient(nb, timeout=240, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    return nb


def _outputs(nb) -> list[dict]:
    return [out for cell in nb.cells if cell.cell_type == "code" for out in cell.outputs]


def _text(nb) -> str:
    """Printed text and the plain-text form of every displayed value, in order."""
    parts = []
    for out in _outputs(nb):
        if out.output_type == "stream":
            parts.append(out.text)
        elif "data" in out:
            parts.append(out.data.get("text/plain", ""))
    return "\n".join(parts)


def _check_common(nb, tolerance: float = 1e-4, images: int = 2) -> str:
    text = _text(nb)
    probe = re.search(r"PROBE (.+) \| (.+)", text)
    assert probe, "the probe cell printed nothing"
    assert Path(probe[1]) == Path(sys.prefix), "the kernel is not the interpreter running the tests"
    assert Path(probe[2]).resolve().is_relative_to(ROOT), f"the kernel imported models from {probe[2]}, not this repo"
    table = [o.data["text/plain"] for o in _outputs(nb) if "data" in o and "copying" in o.data.get("text/plain", "")]
    assert table and all(column in table[0] for column in COLUMNS), "no head-score table in the outputs"
    # induction heatmap, one head's pattern, and the patching heatmap when the run's task allows it
    assert sum("image/png" in o.get("data", {}) for o in _outputs(nb)) == images
    # TransformerLens's detect_head (through the adapter) equals our scores rescaled, per head type.
    gaps = dict(re.findall(r"(\w+_head): max \|TL - ours rescaled\| = (\S+)", text))
    assert set(gaps) == {"previous_token_head", "duplicate_token_head", "induction_head"}
    assert all(float(gap) < tolerance for gap in gaps.values()), gaps
    return text


def test_committed_notebook_is_clean():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    assert code and all(not cell.outputs and cell.execution_count is None for cell in code)


@pytest.mark.slow
def test_notebook_trains_its_own_model(tmp_path, monkeypatch):
    text = _check_common(_execute(tmp_path, monkeypatch), images=3)
    assert re.search(r"trained \d+ steps", text)
    diffs = re.search(r"logit difference: clean (-?\d+\.\d+), corrupted (-?\d+\.\d+)", text)
    assert diffs and "restored" in text
    # The self-trained model has learned enough that clean and corrupted differ: `restored` means something.
    assert float(diffs[1]) - float(diffs[2]) > 0.5 and "nearly coincide" not in text
    assert re.search(r"detect_head on the text .*: best induction score \d\.\d+", text)  # the run's task vocabulary
    assert f"checkpoint: {tmp_path}" in text  # it trained into the temporary folder ...
    assert not list(tmp_path.glob("mixit-notebook-*"))  # ... and removed it


@pytest.mark.slow
def test_notebook_opens_mixit_checkpoint(tmp_path, monkeypatch):
    config = ModelConfig(variant="mixit", d_model=32, n_layers=2, n_heads=4, n_ctx=24, d_vocab=20, seed=0)
    checkpoint = build_model(config).save_pretrained(tmp_path / "ckpt")
    # MixiT's sink heads have a first row summing to 0.5 (the authors' construction). TransformerLens divides
    # by the pattern's total mass, we by the number of scored rows: the rescaled scores differ by about
    # 0.5 / (2n) of a score there, ~5e-4 on these prompts, instead of agreeing to float precision.
    text = _check_common(_execute(tmp_path, monkeypatch, checkpoint), tolerance=2e-3)
    assert f"checkpoint: {checkpoint}" in text and "variant='mixit'" in text
    assert "activation patching needs a retrieval or 1-hop k-hop run directory: skipped" in text
    assert "this checkpoint carries no tokenizer" in text
    assert not re.search(r"trained \d+ steps", text) and not list(tmp_path.glob("mixit-notebook-*"))
