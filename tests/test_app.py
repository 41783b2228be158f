"""app.py, the Streamlit explorer, through streamlit.testing's AppTest: every view on the session's tiny runs
directory (no exception, the expected widgets and numbers), an empty or missing directory, and broken runs."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from analysis import explore as ex

APP = Path(__file__).resolve().parent.parent / "app.py"


@pytest.fixture
def app(explorer_runs, monkeypatch):
    """Run the app on a runs directory (default: the tiny one) with some session state set first."""

    def run(runs_dir: Path | None = None, **state) -> AppTest:
        monkeypatch.setattr(sys, "argv", ["app.py", "--runs", str(runs_dir or explorer_runs["root"])])
        at = AppTest.from_file(str(APP), default_timeout=120)
        for key, value in state.items():
            at.session_state[key] = value
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
    at = app(tmp_path)
    assert "No runs" in texts(at.warning)
    assert at.code[0].value == f"mixit reproduce --preset smoke --out {tmp_path}"


def test_missing_directory_is_an_error_with_the_command(app, tmp_path):
    missing = tmp_path / "nowhere"
    at = app(missing)
    assert "does not exist" in texts(at.error) and str(missing) in texts(at.error)
    assert at.code[0].value == f"mixit reproduce --preset smoke --out {missing}"


# --------------------------------------------------------------------------- Runs
def test_runs_view_lists_filters_and_sorts(app, explorer_runs):
    at = app()
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
    at = app(selected=["retrieval/retrieval-mixit"])
    assert "retrieval/retrieval-mixit" in texts(at.sidebar.markdown)
    at.sidebar.radio(key="view").set_value("Run")
    rerun(at)
    assert at.selectbox(key="run_run").value == "retrieval/retrieval-mixit"


# --------------------------------------------------------------------------- Run
def test_run_view_shows_metrics_curves_parameters_and_figures(app, explorer_runs):
    at = app(view="Run", selected=["retrieval/retrieval-frozen_qk"])
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
    assert params.set_index("component").loc["attn_qk", "frozen"] > 0
    assert params["frozen"].sum() == summary["params_frozen"]
    assert at.image[0].captions == ["retrieval_pairs"]  # it lies inside the runs directory, so it is shown
    assert "not analysed" in texts(at.info).lower()


def test_run_view_of_broken_runs_shows_an_error_for_that_run_only(app):
    at = app(view="Run", selected=["unreadable/bad-json"])
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
    at = app(view="Attention", selected=["retrieval/retrieval-mixit"])
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
    from training import TrainConfig, train

    for name, extra in (("mixed", {"attention": ["mixing", "softmax"]}), ("learned", {"attention": ["learned"]})):
        cfg = TrainConfig(task="retrieval", task_params={"pairs": 2, "num_values": 4}, variant="mixit", d_model=16,
                          n_layers=len(extra["attention"]) if name == "mixed" else 1, n_heads=2, steps=2,
                          batch_size=8, eval_every=2, eval_samples=16, model_extra=extra)
        train(cfg, tmp_path / "grid" / name, progress=False)
    at = app(runs_dir=tmp_path, view="Attention", selected=["grid/mixed"])
    info = texts(at.info)
    assert "Layer(s) 0: fixed random matrices" in info and "every pattern" not in info
    titles = [a["text"] for a in chart(at, "attn_grid")["layout"]["annotations"]]
    assert titles[0].startswith("L0 H0: fixed") and titles[2].startswith("L1 H0: softmax")
    model = ex.load_run_model(ex.open_root(tmp_path), tmp_path / "grid" / "learned")
    table = ex.parameter_table(model).set_index("component")
    size = {name.rsplit(".", 1)[-1]: p.numel() for name, p in model.named_parameters() if ".attn." in name}
    assert table.loc["attn_mix", "trainable"] == size["A_learned"] == 2 * model.cfg.n_ctx ** 2  # not V/O parameters
    assert table.loc["attn_vo", "total"] == sum(size[k] for k in ("W_V", "b_V", "W_O", "b_O"))


def test_attention_view_token_ids_and_bad_input(app):
    at = app(view="Attention", selected=["retrieval/retrieval-standard"])
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
    at = app(view="Attention", selected=["lm/lm-standard"])
    assert at.radio(key="attn_source").options == ["Text", "Token ids"]  # no eval samples: the corpus is outside
    at.text_area(key="attn_text").set_value("the fox")
    rerun(at)
    grid = chart(at, "attn_grid")
    assert len(grid["data"]) == 2 and len(values(grid["data"][0]["z"])) == len("the fox") + 1  # bytes + <|endoftext|>


# --------------------------------------------------------------------------- Heads
def test_heads_view_side_by_side_with_one_colour_scale(app, explorer_runs):
    runs = ["retrieval/retrieval-standard", "retrieval/retrieval-mixit", "memorize/memorize-standard"]
    at = app(view="Heads", heads_runs=runs)
    captions = texts(at.caption)
    assert "retrieval-standard`: stored by mixit analyze" in captions
    assert "retrieval-mixit`: computed now" in captions
    assert "different numbers of sequences" in captions  # stored from 8, computed from 32, on one scale
    assert "too short" in texts(at.info)  # memorize: n_ctx 3, no repeated sequences; not an error
    assert not at.error
    induction = chart(at, "heads_induction")
    assert len(induction["data"]) == 2 and all(d["coloraxis"] == "coloraxis" for d in induction["data"])
    heads = pd.read_csv(explorer_runs["standard"] / "analysis" / "heads.csv")
    np.testing.assert_allclose(values(induction["data"][0]["z"]), ex.score_grid(heads, "induction"))
    axis = induction["layout"]["coloraxis"]
    shown = np.concatenate([values(d["z"]).ravel() for d in induction["data"]])
    assert axis["cmin"] <= shown.min() and axis["cmax"] >= shown.max()
    assert {k.rsplit("_", 1)[-1] for k in charts(at) if "heads_" in k} >= {"induction", "token", "copying", "rep"}

    rep = chart(at, "heads_rep")
    root = ex.open_root(explorer_runs["root"])
    length = at.slider(key="heads_rep_len").value
    tokens, pattern = ex.repeated_pattern(ex.load_run_model(root, explorer_runs["standard"]), 0, 0, length)
    np.testing.assert_allclose(values(rep["data"][0]["z"]), pattern, atol=1e-6)


def test_heads_view_patching_heatmap_and_step_slider(app, explorer_runs):
    runs = ["retrieval/retrieval-standard", "retrieval/retrieval-frozen_qk"]
    at = app(view="Heads", heads_runs=runs)
    patched = chart(at, "heads_patching")
    stored = pd.read_csv(explorer_runs["standard"] / "analysis" / "patching.csv")
    np.testing.assert_allclose(values(patched["data"][0]["z"]), ex.patching_grid(stored))
    assert "retrieval-frozen_qk`: computed now" in texts(at.caption)
    components = chart(at, "heads_components")  # per run: ablation [attention, MLP] x layer, then head shares
    stored = pd.read_csv(explorer_runs["standard"] / "analysis" / "components.csv")
    np.testing.assert_allclose(values(components["data"][0]["z"]), -100 * ex.component_grid(stored, "mean_delta_accuracy"))
    np.testing.assert_allclose(values(components["data"][1]["z"]), ex.head_share_grid(stored))
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
    at_init = ex.compute_head_table(ex.load_run_model(root, explorer_runs["frozen_qk"], step=0))[0]
    induction = chart(at, "heads_induction")
    np.testing.assert_allclose(values(induction["data"][1]["z"]), ex.score_grid(at_init, "induction"), atol=1e-6)


def test_run_view_step_slider_marks_the_curves(app):
    at = app(view="Run", run_run="retrieval/retrieval-frozen_qk")
    slider = at.select_slider(key="run_step")
    assert slider.options == ["0", "1", "30"] and slider.value == 30
    slider.set_value(1)
    at = rerun(at)
    shapes = chart(at, "run_loss")["layout"].get("shapes", [])
    assert [s["x0"] for s in shapes] == [1]


def test_heads_view_defaults_to_the_open_run_and_its_variants(app):
    at = app(view="Heads", current_run="retrieval/retrieval-mixit")  # e.g. opened from a link or the Run view
    shown = at.multiselect(key="heads_runs").value
    assert shown[0] == "retrieval/retrieval-mixit"
    assert {"retrieval/retrieval-standard", "retrieval/retrieval-frozen_qk"} <= set(shown)
    assert all(run.startswith("retrieval/") for run in shown)  # same study and task only


def test_heads_view_with_a_broken_run_still_shows_the_others(app):
    at = app(view="Heads", selected=["unreadable/bad-json", "retrieval/retrieval-standard"])
    assert "unreadable/bad-json cannot be read" in texts(at.error)
    assert chart(at, "heads_induction")["data"]


# --------------------------------------------------------------------------- Compare
def test_compare_view(app, explorer_runs):
    at = app(view="Compare", selected=["retrieval/retrieval-mixit"])
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


# --------------------------------------------------------------------------- Predict
def test_predict_view_top_k(app, explorer_runs):
    at = app(view="Predict", selected=["retrieval/retrieval-standard"])
    root = ex.open_root(explorer_runs["root"])
    task = ex.run_task(root, explorer_runs["standard"])
    example = ex.eval_example(task, 0)
    position = at.slider(key="pred_pos").value
    assert position == ex.default_position(example)
    top = table(at, "rank", "token_id", "probability")
    expected = ex.top_k_next(ex.load_run_model(root, explorer_runs["standard"]), example.tokens, position,
                             at.slider(key="pred_k").value, task)
    assert top["token"].tolist() == expected["token"].tolist()
    assert top["probability"].tolist() == pytest.approx(expected["probability"].tolist())
    assert "Actual next token" in texts(at.markdown)
    at.slider(key="pred_k").set_value(3)
    rerun(at)
    assert len(table(at, "rank", "token_id", "probability")) == 3


def test_predict_view_of_a_classifier(app):
    at = app(view="Predict", selected=["sentiment/sentiment-mixit"])
    probs = table(at, "class", "probability")
    assert probs["class"].tolist() == ["0", "1"] and probs["probability"].sum() == pytest.approx(1.0)


# --------------------------------------------------------------------------- mixit app
def test_mixit_app_launches_streamlit_on_the_directory(explorer_runs, monkeypatch):
    from cli import app as app_cli
    from cli.main import COMMAND_MODULES, main

    assert COMMAND_MODULES[-1] is app_cli
    launched = []
    monkeypatch.setattr(app_cli.os, "execv", lambda path, cmd: launched.append(cmd))
    assert main(["app", str(explorer_runs["root"]), "--port", "8765", "--headless"]) == 0
    cmd = launched[0]
    assert cmd[1:4] == ["-m", "streamlit", "run"] and Path(cmd[4]) == APP
    assert cmd[cmd.index("--server.port") + 1] == "8765" and "--server.headless" in cmd
    assert cmd[cmd.index("--"):] == ["--", "--runs", str(explorer_runs["root"])]


@pytest.mark.parametrize("args, message", [(["nowhere"], "runs directory 'nowhere' does not exist"),
                                           (["ROOT", "--port", "0"], "--port=0 must lie in 1..65535")])
def test_mixit_app_bad_input_is_one_line(explorer_runs, monkeypatch, capsys, args, message):
    from cli import app as app_cli
    from cli.main import main

    monkeypatch.setattr(app_cli.os, "execv", lambda path, cmd: pytest.fail("must not launch"))
    args = [str(explorer_runs["root"]) if a == "ROOT" else a for a in args]
    assert main(["app", *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_mixit_app_without_app_py_says_where_it_runs(tmp_path):
    from cli.app import streamlit_command
    from cli.main import CLIError

    with pytest.raises(CLIError, match="editable install"):
        streamlit_command(tmp_path, app=tmp_path / "app.py")
