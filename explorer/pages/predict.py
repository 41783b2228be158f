"""Predict: a model's top-k next tokens after a position of an input (class probabilities for a classifier)."""

from __future__ import annotations

import plotly.express as px
import streamlit as st

from mixit_lab.analysis import explore as ex
from mixit_lab.analysis import explore_model as em
from mixit_lab.explorer import ui


def classes(root, row, model, example) -> None:
    """A classifier's probability for each class."""
    probs = em.class_probabilities(model, example.tokens, ex.run_classes(root, row["path"]))
    st.dataframe(probs, hide_index=True, key="pred_classes")
    fig = px.bar(probs, x="class", y="probability", range_y=[0, 1], title="class probabilities")
    fig.update_xaxes(type="category")
    st.plotly_chart(fig, key="pred_class_bar")


def next_tokens(model, task, example) -> None:
    """The top-k next tokens after a chosen position, and where the actual next token ranks."""
    n = int(example.tokens.shape[0])
    c1, c2 = st.columns(2)
    position = c1.slider("Predict the token after position", 0, n - 1, em.default_position(example), key="pred_pos") \
        if n > 1 else 0
    k = c2.slider("k", 1, min(20, model.cfg.d_vocab), min(5, model.cfg.d_vocab), key="pred_k")
    top = em.top_k_next(model, example.tokens, position, k, task)
    st.caption(f"After `{position}:{example.labels[position]}`, the model's next-token probabilities:")
    if position + 1 < n:
        actual = int(example.tokens[position + 1])
        p, rank = em.next_token_probability(model, example.tokens, position, actual)
        st.markdown(f"Actual next token: **`{example.labels[position + 1]}`** (id {actual}), "
                    f"probability {p:.4f}, rank {rank} of {model.cfg.d_vocab}.")
    st.dataframe(top, hide_index=True, key="pred_top",
                 column_config={"probability": st.column_config.ProgressColumn("probability", min_value=0.0,
                                                                               max_value=1.0, format="%.4f")})
    fig = px.bar(top, x="probability", y=[f"{t} ({i})" for t, i in zip(top["token"], top["token_id"])],
                 orientation="h", range_x=[0, 1], title=f"top {k} next tokens")
    fig.update_yaxes(autorange="reversed", title="token")
    st.plotly_chart(fig, key="pred_bar")


def main() -> None:
    """The Predict page."""
    found = ui.frame()
    st.header("Predict")
    chosen = ui.run_model_example(found.root, found.runs, "pred")
    if chosen is None:
        return
    row, model, task, example = chosen
    if model.config.n_classes is not None:
        classes(found.root, row, model, example)
    else:
        next_tokens(model, task, example)


if __name__ == "__main__":  # Streamlit runs a page as __main__
    main()
