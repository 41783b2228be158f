"""Attention: every layer x head pattern of a model on one input, and one head enlarged."""

from __future__ import annotations

import streamlit as st

from mixit_lab.analysis import explore as ex
from mixit_lab.analysis import explore_model as em
from mixit_lab.explorer import ui
from mixit_lab.explorer.heatmaps import pattern_colors, pattern_figure, pattern_grid


def fixed_note(model) -> None:
    """Say which patterns are MixiT's fixed matrices (the same for any input)."""
    if em.is_fixed_attention(model):
        sink = ("; head 0 of each layer is the sink head (half on the token itself, half on the first token)"
                if em.has_sink_head(model) else "")
        st.info(f"MixiT: every pattern is a fixed random matrix (input-independent), the same for any input{sink}.")
    elif em.fixed_layers(model):
        fixed = ", ".join(str(layer) for layer in em.fixed_layers(model))
        st.info(f"Layer(s) {fixed}: fixed random matrices (input-independent), the same for any input; the other "
                "layers' patterns depend on the input.")


def main() -> None:
    """The Attention page."""
    found = ui.frame()
    st.header("Attention")
    chosen = ui.run_model_example(found.root, found.runs, "attn")
    if chosen is None:
        return
    row, model, _, example = chosen
    stamp = ex.checkpoint_stamp(found.root, row["path"])
    patterns = ui.cached_patterns(str(found.root), row["path"], stamp, tuple(example.tokens.tolist()))
    kinds = em.head_kinds(model)
    fixed_note(model)
    st.caption("Every layer x head (rows = query position, columns = key position); hover for tokens and weights.")
    st.plotly_chart(pattern_grid(patterns, example.labels, kinds), key="attn_grid")
    n_layers, n_heads = patterns.shape[:2]
    heads = [f"L{l} H{h}" for l in range(n_layers) for h in range(n_heads)]
    head = st.pills("Click a head to enlarge", heads, default=heads[0], key="attn_head") or heads[0]
    l, h = (int(p[1:]) for p in head.split())
    title = f"{row['run']}<br>layer {l}, head {h}: {kinds[l][h]}"
    st.plotly_chart(pattern_figure(patterns[l, h], example.labels, title, pattern_colors(patterns)), key="attn_big")


if __name__ == "__main__":  # Streamlit runs a page as __main__
    main()
