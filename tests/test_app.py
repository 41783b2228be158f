"""The Streamlit explorer (app.py, the checkout's shim, runs explorer/app.py) through streamlit.testing's AppTest:
every page on the session's tiny runs directory (no exception, the expected widgets and numbers), the Study page
on a small study folder, an empty or missing directory, broken runs, and `mixit app`'s command line."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from mixit_lab.analysis import explore as ex
from mixit_lab.analysis import explore_model as em
from mixit_lab.training.rundir import run_lock
from conftest import count_run_file_opens, read_more_than_once

APP = Path(__file__).resolve().parent.parent / "app.py"


def page_file(title: str) -> str:
    """A page's file, relative to app.py (what AppTest.switch_page takes)."""
    return f"explorer/pages/{title.lower()}.py"


def header(at: AppTest) -> str:
    """The page's title (its first header)."""
    return at.header[0].value if len(at.header) else ""


@pytest.fixture
def app(explorer_runs, monkeypatch):
    """Run the app on a runs directory (default: the tiny one) at a page, with some session state set first."""

    def run(runs_dir: Path | None = None, page: str | None = None, **state) -> AppTest:
        monkeypatch.setattr(sys, "argv", ["app.py", "--runs", str(runs_dir or explorer_runs["root"])])
        at = AppTest.from_file(str(APP), default_timeout=120)
        for key, value in state.items():
            at.session_state[key] = value
        if page is not None:  # as a click in the sidebar's navigation would (default: Study)
            at.switch_page(page_file(page))
        at.run()
        assert not at.exception, [e.value for e in at.exception]
        return at

    return run


def charts(at: AppTest) -> dict[str, dict]:
    """The plotly figures on the page, by widget key (their JSON specs)."""
    out = {}
    for chart in at.get("plotly_chart"):
        key = chart.proto.id.rsplit("-", 1)[-1] if chart.proto.id else str(len(out))
        out[key] = json.loads(chart.proto.spec)
    return out


def chart(at: AppTest, key: str) -> dict:
    found = [v for k, v in charts(at).items() if k.endswith(key)]
    assert found, f"no chart {key!r} among {list(charts(at))}"
    return found[0]


def table(at: AppTest, *columns: str) -> pd.DataFrame:
    """The first table on the page that has these columns."""
    for frame in at.dataframe:
        if set(columns) <= set(frame.value.columns):
            return frame.value
    raise AssertionError(f"no table with columns {columns}")


def rerun(at: AppTest) -> AppTest:
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def values(data) -> np.ndarray:
    """A plotly trace's array: a list, or plotly's typed-array dict {"dtype", "bdata" (base64), "shape"}."""
    if isinstance(data, dict) and "bdata" in data:
        flat = np.frombuffer(base64.b64decode(data["bdata"]), dtype=np.dtype(data["dtype"]))
        shape = [int(n) for n in str(data.get("shape", len(flat))).split(",")]
        return flat.reshape(shape)
    return np.asarray(data)


def texts(elements) -> str:
    return "\n".join(str(e.value) for e in elements)


# --------------------------------------------------------------------------- empty and missing directories
def test_empty_directory_shows_the_command_that_creates_runs(app, tmp_path):
    at = app(tmp_path, page="Runs")
    assert "No runs" in texts(at.warning)
    assert at.code[0].value == f"mixit reproduce --preset smoke --out {tmp_path}"


def test_missing_directory_is_an_error_with_the_command(app, tmp_path):
    missing = tmp_path / "nowhere"
    at = app(missing)
    assert "does not exist" in texts(at.error) and str(missing) in texts(at.error)
    assert at.code[0].value == f"mixit reproduce --preset smoke --out {missing}"


# --------------------------------------------------------------------------- Runs
def test_runs_view_lists_filters_and_sorts(app, explorer_runs):
    at = app(page="Runs")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["runs"] == "8" and metrics["unreadable"] == "1" and metrics["analysed"] == "3"
    assert "unreadable/bad-json" in texts(at.warning)  # a broken run is named, the rest listed
    table = at.dataframe[0].value
    assert len(table) == 8
    summary = json.loads((explorer_runs["mixit"] / "summary.json").read_text())
    row = table.set_index("run").loc["retrieval/retrieval-mixit"]
    assert row["eval_acc"] == summary["eval_acc"] and row["params_trainable"] == summary["params_trainable"]

    at.multiselect(key="filter_variant").set_value(["mixit"])
    rerun(at)
    assert set(at.dataframe[0].value["run"]) == {"retrieval/retrieval-mixit", "sentiment/sentiment-mixit"}
    at.multiselect(key="filter_variant").set_value([])
    at.text_input(key="filter_text").set_value("retrieval")
    at.selectbox(key="sort_by").set_value("eval_loss")
    at.toggle(key="sort_desc").set_value(True)
    rerun(at)
    shown = at.dataframe[0].value
    assert len(shown) == 4 and shown["eval_loss"].is_monotonic_decreasing


def test_selected_runs_open_in_the_other_views(app):
    at = app(page="Runs", selected=["retrieval/retrieval-mixit"])
    assert at.multiselect(key="selected").value == ["retrieval/retrieval-mixit"]  # the sidebar's selection
    at.switch_page(page_file("Run"))
    rerun(at)
    assert header(at) == "Run" and at.selectbox(key="run_run").value == "retrieval/retrieval-mixit"
    assert at.multiselect(key="selected").value == ["retrieval/retrieval-mixit"]  # kept across pages


def test_the_study_page_opens_first_and_a_link_may_name_a_page(app, explorer_runs, monkeypatch):
    assert header(app()) == "Study"
    monkeypatch.setattr(sys, "argv", ["app.py", "--runs", str(explorer_runs["root"])])
    at = AppTest.from_file(str(APP), default_timeout=120)
    at.query_params["view"] = "Heads"  # ?view=Heads&run=STUDY/RUN, as links to the single-page explorer were
    at.query_params["run"] = "retrieval/retrieval-mixit"
    at = rerun(at)
    assert header(at) == "Heads" and at.multiselect(key="heads_runs").value[0] == "retrieval/retrieval-mixit"


# --------------------------------------------------------------------------- Run
def test_run_view_shows_metrics_curves_parameters_and_figures(app, explorer_runs):
    at = app(page="Run", selected=["retrieval/retrieval-frozen_qk"])
    summary = json.loads((explorer_runs["frozen_qk"] / "summary.json").read_text())
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["eval accuracy"] == f"{summary['eval_acc']:.3f}"
    assert metrics[f"step (of {summary['step']:,})"] == f"{summary['step']:,}"  # finished: step == steps
    assert metrics["trainable params"] == f"{summary['params_trainable']:,}"
    assert metrics["frozen params"] == f"{summary['params_frozen']:,}" and summary["params_frozen"] > 0
    loss = chart(at, "run_loss")
    steps = [json.loads(x)["step"] for x in (explorer_runs["frozen_qk"] / "metrics.jsonl").read_text().splitlines()]
    assert values(loss["data"][0]["x"]).tolist() == steps
    params = table(at, "component", "trainable")
    assert params.set_index("component").loc["qk", "frozen"] > 0
    assert params["frozen"].sum() == summary["params_frozen"]
    assert at.image[0].captions == ["retrieval_pairs"]  # it lies inside the runs directory, so it is shown
    assert "not analysed" in texts(at.info).lower()


def test_run_view_of_broken_runs_shows_an_error_for_that_run_only(app):
    at = app(page="Run", selected=["unreadable/bad-json"])
    assert "cannot be read" in texts(at.error) and "run.json" in texts(at.error)
    at.selectbox(key="run_run").set_value("unreadable/truncated")
    rerun(at)
    assert "Cannot load the model" in texts(at.error) and "model.safetensors" in texts(at.error)
    assert {m.label for m in at.metric} >= {"status", "eval accuracy"}  # the rest of the run is still shown
    at.selectbox(key="run_run").set_value("retrieval/retrieval-standard")
    rerun(at)
    assert not at.error


# --------------------------------------------------------------------------- Attention
def test_attention_view_labels_mixit_fixed_matrices(app, explorer_runs):
    at = app(page="Attention", selected=["retrieval/retrieval-mixit"])
    assert "input-independent" in texts(at.info)
    grid = chart(at, "attn_grid")
    assert [d["type"] for d in grid["data"]] == ["heatmap"] * 4
    titles = [a["text"] for a in grid["layout"]["annotations"]]
    assert titles == ["L0 H0: fixed sink (input-independent)", "L0 H1: fixed (input-independent)",
                      "L1 H0: fixed sink (input-independent)", "L1 H1: fixed (input-independent)"]
    model = ex.load_run_model(ex.open_root(explorer_runs["root"]), explorer_runs["mixit"])
    n = len(values(grid["data"][3]["z"]))
    np.testing.assert_allclose(values(grid["data"][3]["z"]), model.blocks[1].attn.mixing[1, :n, :n].numpy(), atol=1e-6)
    pills = at.pills(key="attn_head")
    assert pills.options == ["L0 H0", "L0 H1", "L1 H0", "L1 H1"]
    pills.set_value("L1 H1")
    rerun(at)
    big = chart(at, "attn_big")
    assert "layer 1, head 1" in big["layout"]["title"]["text"]
    np.testing.assert_allclose(values(big["data"][0]["z"]), values(grid["data"][3]["z"]))
    ticks = big["layout"]["xaxis"]["ticktext"]
    assert ticks[0].startswith("0:") and len(ticks) == n  # token labels on the axes


def test_a_grid_model_is_labelled_per_layer_and_its_learned_matrices_counted_apart(app, tmp_path):
    from mixit_lab.training import TrainConfig, train

    for name, extra in (("mixed", {"attention": ["mixing", "softmax"]}), ("learned", {"attention": ["learned"]})):
        cfg = TrainConfig(task="retrieval", task_params={"pairs": 2, "num_values": 4}, variant="mixit", d_model=16,
                          n_layers=len(extra["attention"]) if name == "mixed" else 1, n_heads=2, steps=2,
                          batch_size=8, eval_every=2, eval_samples=16, model_extra=extra)
        train(cfg, tmp_path / "grid" / name, progress=False)
    at = app(runs_dir=tmp_path, page="Attention", selected=["grid/mixed"])
    info = texts(at.info)
    assert "Layer(s) 0: fixed random matrices" in info and "every pattern" not in info
    titles = [a["text"] for a in chart(at, "attn_grid")["layout"]["annotations"]]
    assert titles[0].startswith("L0 H0: fixed") and titles[2].startswith("L1 H0: softmax")
    model = ex.load_run_model(ex.open_root(tmp_path), tmp_path / "grid" / "learned")
    table = em.parameter_table(model).set_index("component")
    size = {name.rsplit(".", 1)[-1]: p.numel() for name, p in model.named_parameters() if ".attn." in name}
    assert table.loc["mix", "trainable"] == size["A_learned"] == 2 * model.cfg.n_ctx ** 2  # not V/O parameters
    assert table.loc["v", "total"] + table.loc["o", "total"] == sum(size[k] for k in ("W_V", "b_V", "W_O", "b_O"))


def test_attention_view_token_ids_and_bad_input(app):
    at = app(page="Attention", selected=["retrieval/retrieval-standard"])
    assert at.radio(key="attn_source").value == "Eval sample"
    at.radio(key="attn_source").set_value("Token ids")
    rerun(at)
    at.text_input(key="attn_ids").set_value("1 2 3")
    rerun(at)
    assert values(chart(at, "attn_grid")["data"][0]["z"]).shape == (3, 3)
    at.text_input(key="attn_ids").set_value("1 2 999")
    rerun(at)
    assert "999 is outside the vocabulary" in texts(at.error)
    assert not any(k.endswith("attn_grid") for k in charts(at))


def test_attention_view_of_a_text_model_takes_text(app, explorer_runs):
    at = app(page="Attention", selected=["lm/lm-standard"])
    assert at.radio(key="attn_source").options == ["Text", "Token ids"]  # no eval samples: the corpus is outside
    at.text_area(key="attn_text").set_value("the fox")
    rerun(at)
    grid = chart(at, "attn_grid")
    assert len(grid["data"]) == 2 and len(values(grid["data"][0]["z"])) == len("the fox") + 1  # bytes + <|endoftext|>


# --------------------------------------------------------------------------- Heads
def test_heads_view_side_by_side_with_one_colour_scale(app, explorer_runs):
    runs = ["retrieval/retrieval-standard", "retrieval/retrieval-mixit", "memorize/memorize-standard"]
    at = app(page="Heads", heads_runs=runs)
    captions = texts(at.caption)
    assert "retrieval-standard`: stored by mixit analyze" in captions
    assert "retrieval-mixit`: computed now" in captions
    assert "different numbers of sequences" in captions  # stored from 8, computed from 32, on one scale
    assert "too short" in texts(at.info)  # memorize: n_ctx 3, no repeated sequences; not an error
    assert not at.error
    induction = chart(at, "heads_induction")
    assert len(induction["data"]) == 2 and all(d["coloraxis"] == "coloraxis" for d in induction["data"])
    heads = pd.read_csv(explorer_runs["standard"] / "analysis" / "heads.csv")
    np.testing.assert_allclose(values(induction["data"][0]["z"]), em.score_grid(heads, "induction"))
    axis = induction["layout"]["coloraxis"]
    shown = np.concatenate([values(d["z"]).ravel() for d in induction["data"]])
    assert axis["cmin"] <= shown.min() and axis["cmax"] >= shown.max()
    assert {k.rsplit("_", 1)[-1] for k in charts(at) if "heads_" in k} >= {"induction", "token", "copying", "rep"}

    rep = chart(at, "heads_rep")
    root = ex.open_root(explorer_runs["root"])
    length = at.slider(key="heads_rep_len").value
    tokens, pattern = em.repeated_pattern(ex.load_run_model(root, explorer_runs["standard"]), 0, 0, length)
    np.testing.assert_allclose(values(rep["data"][0]["z"]), pattern, atol=1e-6)


def test_heads_view_patching_heatmap_and_step_slider(app, explorer_runs):
    runs = ["retrieval/retrieval-standard", "retrieval/retrieval-frozen_qk"]
    at = app(page="Heads", heads_runs=runs)
    patched = chart(at, "heads_patching")
    stored = pd.read_csv(explorer_runs["standard"] / "analysis" / "patching.csv")
    np.testing.assert_allclose(values(patched["data"][0]["z"]), em.patching_grid(stored))
    assert "retrieval-frozen_qk`: computed now" in texts(at.caption)
    components = chart(at, "heads_components")  # per run: ablation [attention, MLP] x layer, then head shares
    stored = pd.read_csv(explorer_runs["standard"] / "analysis" / "components.csv")
    np.testing.assert_allclose(values(components["data"][0]["z"]), -100 * em.component_grid(stored, "mean_delta_accuracy"))
    np.testing.assert_allclose(values(components["data"][1]["z"]), em.head_share_grid(stored))
    assert len(components["data"]) == 4
    slider = at.select_slider(key="heads_step")
    assert slider.options == ["0", "1", "30", "final"] and slider.value == "final"
    # An earlier step: frozen_qk's scores come from its kept checkpoint; standard kept none, so its final one.
    slider.set_value(0)
    at = rerun(at)
    captions = texts(at.caption)
    assert "retrieval-standard` kept no checkpoint at step 0" in captions
    assert "the checkpoint kept at step 0" in captions
    root = ex.open_root(explorer_runs["root"])
    at_init = em.compute_head_table(ex.load_run_model(root, explorer_runs["frozen_qk"], step=0))[0]
    induction = chart(at, "heads_induction")
    np.testing.assert_allclose(values(induction["data"][1]["z"]), em.score_grid(at_init, "induction"), atol=1e-6)


def test_run_view_step_slider_marks_the_curves(app):
    at = app(page="Run", run_run="retrieval/retrieval-frozen_qk")
    slider = at.select_slider(key="run_step")
    assert slider.options == ["0", "1", "30"] and slider.value == 30
    slider.set_value(1)
    at = rerun(at)
    shapes = chart(at, "run_loss")["layout"].get("shapes", [])
    assert [s["x0"] for s in shapes] == [1]


def test_heads_view_defaults_to_the_open_run_and_its_variants(app):
    at = app(page="Heads", current_run="retrieval/retrieval-mixit")  # e.g. opened from a link or the Run view
    shown = at.multiselect(key="heads_runs").value
    assert shown[0] == "retrieval/retrieval-mixit"
    assert {"retrieval/retrieval-standard", "retrieval/retrieval-frozen_qk"} <= set(shown)
    assert all(run.startswith("retrieval/") for run in shown)  # same study and task only


def test_heads_view_with_a_broken_run_still_shows_the_others(app):
    at = app(page="Heads", selected=["unreadable/bad-json", "retrieval/retrieval-standard"])
    assert "unreadable/bad-json cannot be read" in texts(at.error)
    assert chart(at, "heads_induction")["data"]


# --------------------------------------------------------------------------- Compare
def test_compare_view(app, explorer_runs):
    at = app(page="Compare", selected=["retrieval/retrieval-mixit"])
    assert at.selectbox(key="cmp_task").value == "retrieval(num_values=8, pairs=3)"
    assert len(table(at, "status", "tokens_per_s")) == 4  # three variants and the truncated copy of the standard run
    acc = chart(at, "cmp_eval_acc")
    assert {d["name"] for d in acc["data"]} == {"Standard", "Frozen QK", "MixiT"}
    memory = table(at, "bits_per_trainable_param")
    stored = pd.read_csv(explorer_runs["memorize"] / "analysis" / "memory.csv")
    assert memory["bits_per_trainable_param"].tolist() == pytest.approx(stored["bits_per_trainable_param"].tolist())
    assert chart(at, "cmp_signal_cos")["data"] and chart(at, "cmp_signal_cov")["data"]
    speed = pd.read_csv(explorer_runs["root"] / "speed" / "speed.csv")
    bars = chart(at, "cmp_speed")["data"]
    assert sorted(y for d in bars for y in values(d["y"])) == pytest.approx(sorted(speed["tokens_per_s"]))



def test_compare_draws_the_curves_of_a_few_runs_of_a_task_with_thousands():
    # Was: every run of the task read and drawn, 29-37 s for a folder of 2,000 runs.
    from mixit_lab.explorer.pages.compare import CURVES_AT_ONCE, curve_runs

    variants = ["standard", "mixit", "frozen_qk"]
    same = pd.DataFrame([{"run": f"t__{v}__s{s}", "variant": v, "seed": s} for s in range(30) for v in variants])
    assert curve_runs(same.head(CURVES_AT_ONCE), []) == list(same.head(CURVES_AT_ONCE)["run"])  # a few: all of them
    assert sorted(curve_runs(same, [])) == ["t__frozen_qk__s0", "t__mixit__s0", "t__standard__s0"]
    assert curve_runs(same, ["t__mixit__s7", "elsewhere"]) == ["t__mixit__s7"]

# --------------------------------------------------------------------------- Predict
def test_predict_view_top_k(app, explorer_runs):
    at = app(page="Predict", selected=["retrieval/retrieval-standard"])
    root = ex.open_root(explorer_runs["root"])
    task = ex.task_of(root, explorer_runs["standard"])
    example = em.eval_example(task, 0)
    position = at.slider(key="pred_pos").value
    assert position == em.default_position(example)
    top = table(at, "rank", "token_id", "probability")
    expected = em.top_k_next(ex.load_run_model(root, explorer_runs["standard"]), example.tokens, position,
                             at.slider(key="pred_k").value, task)
    assert top["token"].tolist() == expected["token"].tolist()
    assert top["probability"].tolist() == pytest.approx(expected["probability"].tolist())
    assert "Actual next token" in texts(at.markdown)
    at.slider(key="pred_k").set_value(3)
    rerun(at)
    assert len(table(at, "rank", "token_id", "probability")) == 3


def test_predict_view_of_a_classifier(app):
    at = app(page="Predict", selected=["sentiment/sentiment-mixit"])
    probs = table(at, "class", "probability")
    assert probs["class"].tolist() == ["0", "1"] and probs["probability"].sum() == pytest.approx(1.0)


# --------------------------------------------------------------------------- Study
FINDINGS = [
    {"id": 1, "finding": "Attention retrieves", "criterion": "retrieval: mixit at least 20 points below standard",
     "ours": "standard 100; mixit 12", "holds": True, "verdict": "holds", "verdict_text": "holds",
     "reference": "standard 100; mixit 11",
     "runs": ["retrieval/retrieval-standard", "retrieval/retrieval-mixit", "elsewhere/not-here"],
     "parts": [{"part": "retrieval", "ours": "100 vs 12", "reference": "100 vs 11", "agrees": True}]},
    {"id": 2, "finding": "MLP memorizes", "criterion": "memorize: standard stores more bits per parameter",
     "ours": "standard 1.2; mixit 1.5", "holds": False, "verdict": "reproduction_failure",
     "verdict_text": "does not hold while the authors' code does: a reproduction failure",
     "reference": "standard 1.9; mixit 1.1"},
]


def write_study(cwd: Path, runs_from: Path, preset: str = "tiny") -> Path:
    """A study folder as `mixit reproduce --preset tiny` leaves one in `cwd`: runs/tiny (a copy of the tiny runs,
    its reproduce.json naming the other two), reports/tiny (findings.json, components.csv, scale_dyck.csv) and
    reports/tiny/figures (two figures). Returns the runs folder, relative to `cwd`."""
    from PIL import Image

    runs = Path("runs") / preset
    shutil.copytree(runs_from, cwd / runs)
    (cwd / runs / "reproduce.json").write_text(json.dumps({
        "preset": preset, "report_dir": f"reports/{preset}", "figures_dir": f"reports/{preset}/figures",
        "failed_figures": {"speed": "no speed measurements"}}))
    report = cwd / "reports" / preset
    report.mkdir(parents=True)
    (report / "findings.json").write_text(json.dumps(FINDINGS))
    pd.DataFrame({"task": ["retrieval"], "variant": ["standard"], "attention_share": [0.9]}).to_csv(
        report / "components.csv", index=False)
    pd.DataFrame({"variant": ["standard", "mixit"], "max_pairs": [4, 4], "accuracy": [100.0, 90.0]}).to_csv(
        report / "scale_dyck.csv", index=False)
    figures = report / "figures"
    figures.mkdir(parents=True)
    for name, color in (("task_accuracy", (0, 114, 178)), ("retrieval_pairs", (213, 94, 0))):
        Image.new("RGB", (40, 20), color).save(figures / f"{name}.png")
    return runs


@pytest.fixture
def study(explorer_runs, tmp_path, monkeypatch) -> Path:
    """A study folder in a fresh working directory (write_study); the runs folder, relative to it."""
    monkeypatch.chdir(tmp_path)
    return write_study(tmp_path, explorer_runs["root"])


def test_study_page_shows_every_finding_with_its_verdict_figures_and_tables(app, study):
    at = app(study)
    assert header(at) == "Study" and not at.info  # nothing missing
    cards = texts(at.markdown)
    assert "1. Attention retrieves" in cards and ":green[**holds**]" in cards
    assert "2. MLP memorizes" in cards and ":red[**does not hold while the authors' code does" in cards
    assert "- standard 1.9" in cards  # the authors' code's numbers beside ours
    captions = texts(at.caption)
    assert "Criterion: retrieval: mixit at least 20 points below standard" in captions
    assert "Preset `tiny`" in captions and "report `reports/tiny`" in captions
    assert "1 more not in this folder" in captions and "speed: failed (no speed measurements)" in captions
    assert table(at, "part", "agrees")["agrees"].tolist() == [True]
    assert sorted(c for image in at.image for c in image.captions) == ["retrieval_pairs", "task_accuracy"]
    assert table(at, "attention_share")["attention_share"].tolist() == [0.9]
    assert table(at, "max_pairs", "accuracy")["accuracy"].tolist() == [100.0, 90.0]
    assert {h.value for h in at.subheader} >= {"Findings", "Figures", "Who does the work", "Where the findings emerge"}


def test_a_reproduction_killed_midway_is_shown_as_interrupted_not_finished(app, study, tmp_path):
    manifest = tmp_path / study / "reproduce.json"
    record = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**record, "status": "running"}))  # what a SIGKILL leaves: no process to say more
    at = app(study)
    assert any("This reproduction is interrupted" in w.value for w in at.warning), [w.value for w in at.warning]
    with run_lock(tmp_path / study):  # while its process holds the folder, it is running
        at = app(study)
    assert any("This reproduction is running" in w.value for w in at.warning), [w.value for w in at.warning]
    manifest.write_text(json.dumps({**record, "status": "finished"}))
    assert not app(study).warning


def test_a_finding_opens_its_runs_in_another_page(app, study):
    at = app(study)
    at.button(key="finding_1_heads").click()
    at = rerun(at)
    mine = ["retrieval/retrieval-standard", "retrieval/retrieval-mixit"]
    assert header(at) == "Heads"
    assert at.multiselect(key="selected").value == mine and at.multiselect(key="heads_runs").value == mine


def test_study_page_on_a_plain_runs_folder_says_in_one_line_what_it_cannot_show(app, explorer_runs, tmp_path,
                                                                                 monkeypatch):
    monkeypatch.chdir(tmp_path)
    at = app()  # reproduce.json names a figures folder only
    assert header(at) == "Study" and len(at.info) == 1
    assert at.info[0].value.startswith("Not shown: findings and tables (no report folder: looked at reports/tiny)")
    assert [c for image in at.image for c in image.captions] == ["retrieval_pairs"]
    mine = tmp_path / "mine"  # a runs folder of one's own: no reproduce.json at all
    shutil.copytree(explorer_runs["standard"], mine / "study" / "run")
    at = app(mine)
    assert len(at.info) == 1 and "reports/mine" in at.info[0].value and "reports/mine/figures" in at.info[0].value
    assert not at.error


def test_the_last_study_names_the_report_when_the_manifest_does_not(explorer_runs, tmp_path, monkeypatch):
    from mixit_lab.explorer import report

    monkeypatch.chdir(tmp_path)
    runs = write_study(tmp_path, explorer_runs["root"])
    (tmp_path / "reports" / "tiny").rename(tmp_path / "elsewhere")
    (tmp_path / runs / "reproduce.json").write_text(json.dumps({"preset": "tiny"}))
    assert report.locate(runs).report_dir is None
    (tmp_path / ".mixit_cache").mkdir()
    (tmp_path / ".mixit_cache" / "last_study.json").write_text(json.dumps({"runs_dir": str(runs),
                                                                          "report_dir": "elsewhere"}))
    found = report.locate(runs)
    assert found.report_dir == tmp_path / "elsewhere" and found.figures_dir is None  # it moved with the report
    assert found.looked["figures_dir"][-1] == tmp_path / "reports" / "tiny" / "figures"  # the default, looked at last
    assert [f["id"] for f in report.read_findings(found.report_dir)] == [1, 2]


def test_a_diverged_run_shows_its_message(app, explorer_runs, tmp_path):
    """The message shows as written: markdown in it (an image the browser would fetch) is escaped, not rendered."""
    run = tmp_path / "retrieval" / "diverged"
    shutil.copytree(explorer_runs["standard"], run)
    summary = json.loads((run / "summary.json").read_text())
    image = "![x](http://example.invalid/i.png)"
    summary.update(status="diverged", message=f"loss is nan at step 12; the checkpoint of step 10 is kept {image}")
    (run / "summary.json").write_text(json.dumps(summary))
    at = app(tmp_path, page="Runs")
    assert "retrieval/diverged: diverged: loss is nan at step 12" in texts(at.warning)
    assert image not in texts(at.warning) and "\\!\\[x\\](http" in texts(at.warning)
    assert table(at, "run", "message")["message"].iloc[0].startswith("loss is nan at step 12")
    at = app(tmp_path, page="Run", selected=["retrieval/diverged"])
    assert "Training diverged: loss is nan at step 12" in texts(at.error) and image not in texts(at.error)


# --------------------------------------------------------------------------- mixit app
def free_port() -> int:
    """A port the OS says is free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def launched(monkeypatch) -> list[list[str]]:
    """The command lines `mixit app` would serve (nothing is started)."""
    from mixit_lab.cli import app as app_cli

    commands: list[list[str]] = []
    monkeypatch.setattr(app_cli, "launch", lambda cmd: commands.append(cmd) or 0)
    return commands


@pytest.mark.parametrize("page", ["Study", "Runs", "Run", "Attention", "Heads", "Compare", "Predict"])
def test_a_page_load_opens_each_run_file_once(app, explorer_runs, monkeypatch, page):
    """The explorer's data layer opens each run once (mixit_lab.analysis.explore.open_run, a Run that keeps what it
    reads): however many of its functions a page calls, every file of every run is read once at most."""
    import streamlit as st

    st.cache_data.clear()
    st.cache_resource.clear()
    monkeypatch.setattr(ex, "_OPENED", {})  # a first page load: nothing read before
    opened = count_run_file_opens(explorer_runs["root"], monkeypatch)
    app(page=page, selected=["retrieval/retrieval-mixit", "retrieval/retrieval-frozen_qk"])
    assert opened and read_more_than_once(opened, explorer_runs["root"]) == {}


def test_mixit_app_launches_streamlit_on_the_directory(explorer_runs, launched):
    from mixit_lab import explorer
    from mixit_lab.cli import app as app_cli
    from mixit_lab.cli.main import COMMANDS, main

    assert list(COMMANDS)[-1] == "app" and app_cli.__name__ == f"mixit_lab.cli.{COMMANDS['app']}"
    port = free_port()
    assert main(["app", str(explorer_runs["root"]), "--port", str(port), "--headless"]) == 0
    cmd = launched[0]
    assert cmd[1:4] == ["-m", "streamlit", "run"] and Path(cmd[4]) == Path(explorer.__file__).parent / "app.py"
    assert cmd[cmd.index("--server.port") + 1] == str(port) and "--server.headless" in cmd
    assert cmd[cmd.index("--"):] == ["--", "--runs", str(explorer_runs["root"])]


def test_mixit_app_without_a_folder_opens_the_last_study(tmp_path, monkeypatch, launched, capsys):
    from mixit_lab.cli.main import main

    monkeypatch.chdir(tmp_path)
    for name in ("older", "newer"):  # no last_study.json: the newest runs/*/reproduce.json
        (tmp_path / "runs" / name).mkdir(parents=True)
        (tmp_path / "runs" / name / "reproduce.json").write_text("{}")
    os.utime(tmp_path / "runs" / "older" / "reproduce.json", (1, 1))
    assert main(["app", "--headless"]) == 0 and launched[-1][-1] == str(Path("runs/newer"))
    (tmp_path / ".mixit_cache").mkdir()
    (tmp_path / ".mixit_cache" / "last_study.json").write_text(json.dumps(
        {"runs_dir": str(tmp_path / "runs/older"), "report_dir": str(tmp_path / "reports/older"),
         "figures_dir": str(tmp_path / "figures/out/older"), "preset": "older"}))  # as mixit reproduce writes it
    assert main(["app", "--headless"]) == 0 and launched[-1][-1] == "runs/older"
    assert "runs/older" in capsys.readouterr().err  # it says which folder it opened


def test_mixit_app_with_nothing_to_open_says_where_to_point_it(tmp_path, monkeypatch, launched, capsys):
    from mixit_lab.cli.main import main

    monkeypatch.chdir(tmp_path)
    assert main(["app"]) == 2 and not launched
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "mixit app DIR" in err and "mixit reproduce" in err


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 128 + signal.SIGTERM)])
def test_mixit_app_passes_signals_to_the_server_and_ctrl_c_exits_130(tmp_path, sig, status):
    from mixit_lab.cli.app import launch

    up = tmp_path / "server-up"
    server = [sys.executable, "-c", f"import pathlib, time; pathlib.Path({str(up)!r}).touch(); time.sleep(60)"]

    def signal_once_the_server_runs() -> None:  # Ctrl-C, or `kill PID`, on `mixit app` (not during its start)
        deadline = time.monotonic() + 30
        while not up.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        os.kill(os.getpid(), sig)

    # SIGINT as from a terminal: a command started in the background (`make test &`) inherits it ignored, and the
    # server would then sleep through the Ctrl-C and exit 0
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    sender = threading.Thread(target=signal_once_the_server_runs, daemon=True)
    sender.start()
    started = time.monotonic()
    try:
        assert launch(server) == status
    finally:
        signal.signal(signal.SIGINT, previous)
    sender.join(timeout=5)
    assert time.monotonic() - started < 30  # the server stopped with it


@pytest.mark.parametrize("args, message", [(["nowhere"], "runs directory 'nowhere' does not exist"),
                                           (["ROOT", "--port", "0"], "--port=0 must lie in 1..65535")])
def test_mixit_app_bad_input_is_one_line(explorer_runs, launched, capsys, args, message):
    from mixit_lab.cli.main import main

    args = [str(explorer_runs["root"]) if a == "ROOT" else a for a in args]
    assert main(["app", *args]) == 2 and not launched
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_mixit_app_without_the_explorer_file_is_one_line(tmp_path):
    from mixit_lab.cli.app import streamlit_command
    from mixit_lab.cli.common import CLIError

    with pytest.raises(CLIError, match="reinstall mixit-lab"):
        streamlit_command(tmp_path, app=tmp_path / "app.py")
