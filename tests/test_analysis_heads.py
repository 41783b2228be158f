import math

import pandas as pd
import pytest
import torch
from transformer_lens import head_detector as hd

from mixit_lab.analysis.heads import (
    SCORES, copying_scores, head_scores, in_context_loss, repeated_tokens, source_attention_scores, source_chance,
    task_induction_scores,
)
from mixit_lab.models import ModelConfig, build_model
from mixit_lab.training.tasks import get_task


def induction_model(d_vocab: int = 32, n_ctx: int = 64):
    """A 2-layer `standard` model wired by hand: L0H0 is a previous-token head, L1H0 an induction head.

    Residual stream (d_model 128): token one-hot in dims [0, V), "previous token" in [V, 2V), the
    induction head's output in [2V, 3V). MLPs and all other heads write nothing.

    Positions reach attention only through rotary embeddings. rope_base = 1e32 with d_head 64 gives
    rotary pair p the frequency 10^-p rad/position: pairs 0-2 turn fast enough to locate the previous
    position, pairs >= 4 are static over 64 positions and carry content. L0H0 has constant q and k
    (biases only): per pair q = s (1, 0), k = s (cos f, sin f), so q.k = s^2 cos(f (i - j - 1)),
    maximal at j = i - 1; weighting the three pairs 1:2:4 leaves no other offset within 128
    positions closer than 0.39 to the maximum. L1H0 matches the query's token (W_Q reads dims
    [0, V)) against each key's previous token (W_K reads [V, 2V)) in the static pairs, then copies
    the key's token (W_V, W_O) into [2V, 3V), which the unembedding reads. RMSNorm (weights 1) only
    rescales: every position's residual has the same norm (1 before layer 0, sqrt 2 before layer 1).
    """
    V = d_vocab
    cfg = ModelConfig(variant="standard", d_model=128, n_layers=2, n_heads=2, n_ctx=n_ctx, d_vocab=V, rope_base=1e32)
    model = build_model(cfg)
    D, E = cfg.d_model, cfg.d_head
    half = E // 2
    tok, prev, out = torch.arange(V), V + torch.arange(V), 2 * V + torch.arange(V)
    static = [p for p in range(4, half)] + [p + half for p in range(4, half)]
    assert len(static) >= V and 3 * V <= D
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for block in model.blocks:
            block.ln1.w.fill_(1)
            block.ln2.w.fill_(1)
        model.ln_final.w.fill_(1)
        model.embed.W_E[tok, tok] = 1.0
        a0 = model.blocks[0].attn
        for p, weight in zip(range(3), (1.0, 2.0, 4.0)):
            freq = cfg.rope_base ** (-2 * p / E)
            s = math.sqrt(400.0 * weight)
            a0.b_Q[0, p] = s
            a0.b_K[0, p] = s * math.cos(freq)
            a0.b_K[0, p + half] = s * math.sin(freq)
        a0.W_V[0, tok, torch.arange(V)] = 1 / math.sqrt(D)  # ln1 output has sqrt(D) on the token dim
        a0.W_O[0, torch.arange(V), prev] = 1.0
        a1 = model.blocks[1].attn
        g = 1 / math.sqrt(D / 2)  # ln1 output has sqrt(D / 2) on each of the token and previous-token dims
        sb = math.sqrt(30.0 * math.sqrt(E))  # a match scores 30 after the 1/sqrt(d_head) scaling
        idx = torch.tensor(static[:V])
        a1.W_Q[0, tok, idx] = sb * g
        a1.W_K[0, prev, idx] = sb * g
        a1.W_V[0, tok, torch.arange(V)] = g
        a1.W_O[0, torch.arange(V), out] = 1.0
        model.unembed.W_U[out, tok] = 10.0
    return model


def test_hand_built_induction_head_is_recovered():
    model = induction_model()
    result = head_scores(model, n_seqs=8, seq_len=32)
    df = result.frame().set_index(["layer", "head"])
    chance = result.chance
    assert df.loc[(0, 0), "previous_token"] > 0.99
    assert df.loc[(0, 0), "label"] == "previous-token"
    assert df.loc[(1, 0), "induction"] > 0.95
    assert df.loc[(1, 0), "label"] == "induction"
    assert df.loc[(1, 0), "copying"] > 0.99  # its OV circuit maps every token to itself
    # Heads that write nothing attend uniformly: their scores are the uniform-attention chance levels.
    for score in SCORES:
        assert df.loc[(1, 1), score] == pytest.approx(chance[score], abs=1e-4)
    assert math.isnan(df.loc[(0, 0), "copying"])  # writes to a subspace the unembedding ignores
    assert result.in_context_drop > 5 and result.loss_second_half < 0.1
    # With a vocabulary smaller than r, tokens repeat within r: more targets per row, higher chance.
    repeats = head_scores(induction_model(d_vocab=20), n_seqs=8, seq_len=32).frame().set_index(["layer", "head"])
    assert repeats.attrs["chance"]["induction"] > 1.5 * chance["induction"]
    for score in SCORES:
        assert repeats.loc[(1, 1), score] == pytest.approx(repeats.attrs["chance"][score], abs=1e-4)


def test_mixit_heads_score_near_chance():
    cfg = ModelConfig(variant="mixit", d_model=64, n_layers=2, n_heads=4, n_ctx=64, d_vocab=40, seed=0)
    result = head_scores(build_model(cfg), n_seqs=8, seq_len=32)
    df, chance = result.frame(), result.chance["induction"]
    assert chance == pytest.approx(sum(1 / (i + 1) for i in range(32, 64)) / 32)  # distinct tokens in r
    assert chance == pytest.approx(math.log(2) / 32, rel=0.05)
    assert (df["induction"] - chance).abs().max() < 0.1
    assert (df["label"] != "induction").all()
    sink = df[df["head"] == 0]  # MixiT's sink heads: 0.5 on the first key, 0.5 on the query itself
    assert sink["first_token"].tolist() == pytest.approx([0.5, 0.5])
    assert (sink["label"] == "sink").all()


@pytest.mark.parametrize("variant, d_vocab", [("standard", 64), ("standard", 7), ("shaped", 64), ("mixit", 11)])
def test_scores_agree_with_transformer_lens_head_detector(variant, d_vocab):
    # init_std 0.5 makes the random standard model's attention far from uniform.
    cfg = ModelConfig(variant=variant, d_model=64, n_layers=2, n_heads=4, n_ctx=48, d_vocab=d_vocab, init_std=0.5, seed=1)
    model = build_model(cfg)
    n = 24
    ours = head_scores(model, n_seqs=3, seq_len=n, seed=5, batch_size=2).frame()
    tokens = repeated_tokens(d_vocab, 3, n, seed=5)
    _, cache = model.run_with_cache(tokens)
    T = 2 * n
    rows = {"induction": range(n, T), "duplicate_token": range(n, T), "previous_token": range(1, T),
            "current_token": range(T), "first_token": range(1, T)}
    for layer in range(cfg.n_layers):
        for head in range(cfg.n_heads):
            theirs = {name: 0.0 for name in SCORES}
            for b in range(3):
                seq = tokens[b]
                detection = {
                    "induction": hd.get_induction_head_detection_pattern(seq),
                    "duplicate_token": hd.get_duplicate_token_head_detection_pattern(seq),
                    "previous_token": hd.get_previous_token_head_detection_pattern(seq),
                    "current_token": torch.eye(T),
                    "first_token": torch.zeros(T, T).index_fill_(1, torch.tensor([0]), 1.0),
                }
                pattern = cache["pattern", layer][b, head]
                for name in SCORES:
                    keep = torch.zeros(T, 1)
                    keep[list(rows[name])] = 1.0
                    theirs[name] += hd.compute_head_attention_similarity_score(
                        pattern * keep, detection[name], exclude_bos=False, exclude_current_token=False,
                        error_measure="mul",
                    ) / 3
            row = ours[(ours["layer"] == layer) & (ours["head"] == head)].iloc[0]
            for name in SCORES:
                assert row[name] == pytest.approx(theirs[name], abs=1e-5), (layer, head, name)


def test_induction_score_is_transformer_lens_score_over_second_half_rows():
    # On the full [r, r] pattern (all rows), TransformerLens's score is ours times the share of scored rows.
    model = induction_model()
    n = 16
    tokens = repeated_tokens(32, 1, n, seed=3)
    _, cache = model.run_with_cache(tokens)
    full = hd.compute_head_attention_similarity_score(
        cache["pattern", 1][0, 0], hd.get_induction_head_detection_pattern(tokens[0]),
        exclude_bos=False, exclude_current_token=False, error_measure="mul",
    )
    ours = head_scores(model, n_seqs=1, seq_len=n, seed=3).frame().iloc[2]["induction"]
    assert full == pytest.approx(ours * n / (2 * n), abs=1e-5)
    assert 0.45 < full < 0.5


def test_copying_score_matches_dense_eigenvalues():
    # shaped: width multipliers and non-trivial RMSNorm weights must not break the factored computation.
    cfg = ModelConfig(variant="shaped", d_model=32, n_layers=2, n_heads=4, n_ctx=16, d_vocab=20, seed=3)
    model = build_model(cfg)
    with torch.no_grad():
        for block in model.blocks:
            block.ln1.w.uniform_(0.5, 1.5)
        model.ln_final.w.uniform_(0.5, 1.5)
    scores = copying_scores(model)
    for layer, block in enumerate(model.blocks):
        for head in range(cfg.n_heads):
            factors = [model.embed.W_E, torch.diag(block.ln1.w), block.attn.W_V[head], block.attn.W_O[head],
                       torch.diag(model.ln_final.w), model.unembed.W_U]
            M = torch.linalg.multi_dot([f.detach().double() for f in factors])  # the reference in fp64
            eig = torch.linalg.eigvals(M)
            expected = (eig.sum().real / eig.abs().sum()).item()
            # copying_scores works in fp32, whose rounding depends on the thread count: ~1e-6 here.
            assert scores[layer, head].item() == pytest.approx(expected, abs=2e-5)
    # A head whose OV circuit is minus the identity copies perfectly negatively.
    with torch.no_grad():
        block = model.blocks[0]
        block.ln1.w.fill_(1)
        model.ln_final.w.fill_(1)
        model.embed.W_E.zero_()
        model.embed.W_E[:, :20] = torch.eye(20)
        model.unembed.W_U.zero_()
        model.unembed.W_U[:20] = torch.eye(20)
        block.attn.W_V[0] = torch.eye(32)[:, :8]
        block.attn.W_O[0] = -torch.eye(32)[:8]
    assert copying_scores(model)[0, 0].item() == pytest.approx(-1.0)


def test_in_context_loss_table():
    df = in_context_loss(induction_model(), n_seqs=4, seq_len=16)
    assert list(df.columns) == ["position", "half", "loss"] and len(df) == 31
    assert df.set_index("position").loc[16, "half"] == "boundary"
    second = df[df["half"] == "second"]["loss"]
    assert second.iloc[1:].max() < 0.01 < 1 < df[df["half"] == "first"]["loss"].mean()
    # Target n + 1 is predicted at query n, whose earlier occurrence is position 0. Position 0's
    # "previous token" slot holds its own token (it can only attend to itself), so key 0 matches as
    # well as key 1: half the attention goes to each and the loss is ln 2.
    assert second.iloc[0] == pytest.approx(math.log(2), abs=0.01)


def test_head_scores_validates_inputs():
    model = build_model(ModelConfig(n_ctx=16, d_vocab=13, d_model=32))
    with pytest.raises(ValueError, match="seq_len=9 .*n_ctx=16.*seq_len <= 8"):
        head_scores(model, seq_len=9)
    with pytest.raises(ValueError, match="n_seqs=0"):
        head_scores(model, n_seqs=0, seq_len=4)
    df = head_scores(model, n_seqs=2, seq_len=8).frame()
    assert list(df.columns) == ["layer", "head", *SCORES, "copying", "label"] and len(df) == 2 * 4


# --------------------------------------------------------------------------- task-aligned induction
def _khop_model(task, variant="standard", n_heads=4, **kw):
    cfg = ModelConfig(variant=variant, d_model=8 * n_heads, n_layers=2, n_heads=n_heads, n_ctx=task.seq_len,
                      d_vocab=task.d_vocab, seed=0, **kw)
    return build_model(cfg)


def _forced_patterns(tokens, task, t):
    """[n, 5, T, T] patterns for the answer rows; other rows attend uniformly (causal).

    head 0 one-hot on each answer's letter s in X; head 1 uniform; head 2 one-hot on the aligned
    position N + s; head 3 by position alone: each query on the letter position most common for
    it in this set, whatever the tokens; head 4 one-hot on s - 1 (a near miss).
    """
    queries, sources = task.answer_sources(tokens)
    letter, aligned = sources.unbind(-1)
    uniform = torch.ones(t, t).tril()
    uniform = uniform / uniform.sum(-1, keepdim=True)
    P = uniform.expand(tokens.shape[0], 5, t, t).clone()
    for col, q in enumerate(queries.tolist()):
        seen = letter[:, col][letter[:, col] >= 0]
        if seen.numel():  # y_0 is always null
            P[:, 3, q] = torch.eye(t)[int(torch.bincount(seen).argmax())]
    for row, col in zip(*torch.nonzero(letter >= 0, as_tuple=True)):
        q, s, a = queries[col], letter[row, col], aligned[row, col]
        P[row, 0, q] = torch.eye(t)[s]
        P[row, 2, q] = torch.eye(t)[a]
        P[row, 4, q] = torch.eye(t)[s - 1]
    return P


def test_source_score_is_one_on_the_source_and_chance_when_uniform():
    # A hook replaces layer 1's patterns with the hand-made ones of `_forced_patterns`.
    task = get_task("khop", hops=1, length=10, alphabet=3)
    tokens, _ = task.eval_set(200)
    model = _khop_model(task, n_heads=5)
    forced = _forced_patterns(tokens, task, task.seq_len)

    def force(pattern, hook):
        return forced.to(pattern.dtype)

    with model.hooks(fwd_hooks=[("blocks.1.attn.hook_pattern", force)]):
        df = task_induction_scores(model, task, tokens, batch_size=256).frame().set_index(["layer", "head"])
    assert list(df.reset_index().columns) == ["layer", "head", "score", "shuffled"]
    queries, sources = task.answer_sources(tokens)
    scored = sources[..., 0] >= 0
    # Uniform attention over the q + 1 visible keys puts 2 / (q + 1) on the two positions holding the answer.
    expected_chance = (2.0 / (queries[None, :].expand_as(scored)[scored] + 1).double()).mean().item()
    assert df.attrs["chance"] == pytest.approx(expected_chance)
    assert df.attrs["rows"] == int(scored.sum()) and df.attrs["hops"] == 1 and df.attrs["n_seqs"] == 200
    assert df.loc[(1, 0), "score"] == pytest.approx(1.0)  # reading the letter in X ...
    assert df.loc[(1, 2), "score"] == pytest.approx(1.0)  # ... or its aligned position both count
    assert df.loc[(1, 1), "score"] == pytest.approx(expected_chance)
    assert df.loc[(1, 4), "score"] == pytest.approx(0.0)  # one key off scores nothing
    assert 0.0 <= df.attrs["chance"] < df.attrs["positional"] < 0.9
    # Reading by position alone reaches the positional level, far above chance, and scores as much
    # on another sequence's sources; reading the tokens does not carry over to other sequences.
    assert df.loc[(1, 3), "score"] == pytest.approx(df.attrs["positional"])
    assert df.loc[(1, 3), "score"] > 3 * df.attrs["chance"]
    assert df.loc[(1, 3), "shuffled"] == pytest.approx(df.loc[(1, 3), "score"], abs=0.05)
    for head in (0, 2):
        assert df.loc[(1, head), "shuffled"] < df.attrs["positional"] + 0.05
    assert df.loc[(1, 1), "shuffled"] == pytest.approx(expected_chance, abs=0.01)


def test_source_scores_do_not_depend_on_batching():
    task = get_task("khop", hops=1, length=10, alphabet=3)
    tokens, _ = task.eval_set(24)
    model = _khop_model(task, init_std=0.5)  # far from uniform attention
    whole = task_induction_scores(model, task, tokens, batch_size=64).table
    parts = task_induction_scores(model, task, tokens, batch_size=5).table
    for column in ("score", "shuffled"):
        assert parts[column].tolist() == pytest.approx(whole[column].tolist())
    assert task_induction_scores(model, task, tokens[:1]).table["shuffled"].isna().all()  # no other sequence


def test_source_score_counts_only_non_null_targets():
    # Rows whose answer is null carry no source: putting all attention there must not move the score.
    t = 6
    tokens = torch.zeros(2, t, dtype=torch.long)
    queries = torch.tensor([3, 4, 5])
    sources = torch.tensor([[1, -1, 2], [-1, -1, 4]])
    model = build_model(ModelConfig(d_model=16, n_layers=1, n_heads=1, n_ctx=t, d_vocab=5))
    pattern = torch.zeros(2, 1, t, t)
    pattern[:, :, :, 0] = 1  # every row on key 0 ...
    pattern[0, 0, 3], pattern[0, 0, 5], pattern[1, 0, 5] = torch.eye(t)[1], torch.eye(t)[2], torch.eye(t)[4]
    with model.hooks(fwd_hooks=[("blocks.0.attn.hook_pattern", lambda p, hook: pattern.to(p.dtype))]):
        df = source_attention_scores(model, tokens, queries, sources).frame()
    assert df["score"].item() == pytest.approx(1.0)  # ... except the scored rows, which hit their sources
    levels = source_chance(queries, sources, t)
    assert levels["rows"] == 3 and levels["chance"] == pytest.approx((1 / 4 + 1 / 6 + 1 / 6) / 3)
    # Content-free best: query 3 always reads key 1 (1 row); query 5 reads key 2 or 4 (1 of its 2 rows).
    assert levels["positional"] == pytest.approx(2 / 3)
    assert source_chance(queries, sources, t, causal=False)["chance"] == pytest.approx(1 / t)
    # Two sources per query: the mass on either counts, once.
    pairs = torch.stack([sources, torch.where(sources >= 0, 0, -1)], dim=-1)  # add key 0 where scored
    with model.hooks(fwd_hooks=[("blocks.0.attn.hook_pattern", lambda p, hook: pattern.to(p.dtype))]):
        assert source_attention_scores(model, tokens, queries, pairs).table["score"].item() == pytest.approx(1.0)
    levels = source_chance(queries, pairs, t)
    assert levels["chance"] == pytest.approx(2 * (1 / 4 + 1 / 6 + 1 / 6) / 3)
    assert levels["positional"] == pytest.approx(1.0)  # key 0 is a source of every scored row


def test_source_scores_reject_bad_inputs():
    task = get_task("khop", hops=1, length=6, alphabet=3)
    model = _khop_model(task)
    tokens, _ = task.eval_set(4)
    queries, sources = task.answer_sources(tokens)
    with pytest.raises(ValueError, match="sources \\[n, R\\] or \\[n, R, S\\]"):
        source_attention_scores(model, tokens, queries, sources[:, :3])
    with pytest.raises(ValueError, match="same source twice"):
        source_attention_scores(model, tokens, queries, sources[..., [0, 0]])
    late = torch.full_like(sources[..., 0], task.seq_len - 1)
    with pytest.raises(ValueError, match="after its query"):
        source_attention_scores(model, tokens, queries, late)
    with pytest.raises(ValueError, match="must lie in"):
        source_attention_scores(model, tokens, queries, late + 1)
    with pytest.raises(ValueError, match="no scored rows"):
        source_attention_scores(model, tokens, queries, torch.full_like(sources, -1))
    with pytest.raises(ValueError, match="answer_sources"):
        task_induction_scores(model, get_task("addition", digits=1), tokens)


def test_untrained_and_mixit_models_score_near_chance_on_khop():
    task = get_task("khop", hops=1, length=16, alphabet=6)
    tokens, _ = task.eval_set(64)
    for variant in ("standard", "mixit"):
        result = task_induction_scores(_khop_model(task, variant), task, tokens)
        df, chance = result.frame(), result.chance
        assert 0.06 < chance < 0.1  # two keys among 17..32 visible ones
        assert df["score"].max() < 2 * chance, variant  # nothing reads the source before training


# --------------------------------------------------------------------------- a run path instead of a model
def _khop_run(tmp_path, task, model):
    """A run directory as analyses read it: run.json (the train config) + checkpoint/."""
    import json

    from mixit_lab.training import TrainConfig

    run = tmp_path / "run"
    model.save_pretrained(run / "checkpoint")
    cfg = TrainConfig(task="khop", task_params=task.params, d_model=model.cfg.d_model, n_layers=2, n_heads=4)
    (run / "run.json").write_text(json.dumps({"train": cfg.to_dict()}))
    return run


def test_analyses_take_a_run_directory_or_checkpoint_path(tmp_path):
    from mixit_lab.analysis.ablation import ablate_heads
    from mixit_lab.analysis.attention import attention_stats
    from mixit_lab.analysis.common import as_model

    task = get_task("khop", hops=1, length=8, alphabet=6)
    model = _khop_model(task, init_std=0.2)
    run = _khop_run(tmp_path, task, model)
    tokens, mask = task.eval_set(32)
    expected = head_scores(model, n_seqs=4, seq_len=4).frame()
    for path in (run, str(run / "checkpoint")):
        pd.testing.assert_frame_equal(head_scores(path, n_seqs=4, seq_len=4).frame(), expected)
    pd.testing.assert_frame_equal(attention_stats(str(run), tokens), attention_stats(model, tokens))
    assert ablate_heads(run, tokens, mask, "token", [(1, 2)]) == ablate_heads(model, tokens, mask, "token", [(1, 2)])
    # the task rebuilt from run.json, the tokens its first eval rows
    by_run = task_induction_scores(run / "checkpoint")  # checkpoint/ inside a run finds its run.json
    pd.testing.assert_frame_equal(by_run.frame(), task_induction_scores(model, task, task.eval_set(512)[0]).frame())
    with pytest.raises(ValueError, match="bare checkpoint"):
        task_induction_scores(model.save_pretrained(tmp_path / "bare"))  # a bare checkpoint has no task
    with pytest.raises(FileNotFoundError, match="missing"):
        head_scores(tmp_path / "missing")
    with pytest.raises(TypeError, match="neither a model nor a run directory"):
        as_model(42)


def test_head_ablation_takes_a_metric_callable():
    from mixit_lab.analysis.ablation import ablate_heads, head_ablation

    task = get_task("khop", hops=1, length=8, alphabet=6)
    model = _khop_model(task, init_std=0.2)
    tokens, mask = task.eval_set(32)

    def last_logit(logits: torch.Tensor) -> torch.Tensor:  # [batch, pos, d_vocab] -> scalar, TransformerLens style
        return logits[:, -2].gather(-1, tokens[:, -1:]).mean()

    result = head_ablation(model, tokens, metric=last_logit, method="zero")
    table = result.frame()
    assert list(table.columns) == ["layer", "head", "metric", "delta_metric", "rank"] and len(table) == 8
    model.eval()
    with torch.no_grad():
        base = last_logit(model(tokens)).item()

        def zero_head(z, hook):
            z = z.clone()
            z[:, :, 3] = 0
            return z

        ablated = last_logit(model.run_with_hooks(tokens, fwd_hooks=[("blocks.1.attn.hook_z", zero_head)])).item()
    assert table.attrs["baseline_metric"] == pytest.approx(base, rel=1e-5) and result.baseline_loss is None
    row = table[(table["layer"] == 1) & (table["head"] == 3)].iloc[0]
    assert row["metric"] == pytest.approx(ablated, rel=1e-5)
    assert row["delta_metric"] == pytest.approx(ablated - base, rel=1e-4, abs=1e-6)
    assert table["delta_metric"].is_monotonic_increasing and list(table["rank"]) == list(range(1, 9))  # biggest drop first
    assert ablate_heads(model, tokens, None, last_logit, [(1, 3)], "zero")["metric"] == pytest.approx(ablated, rel=1e-5)
    with pytest.raises(ValueError, match="scalar tensor"):
        head_ablation(model, tokens, metric=lambda logits: logits[:, -1, 0])
    with pytest.raises(ValueError, match="needs the mask"):
        head_ablation(model, tokens, metric="token")


# --------------------------------------------------------------------------- typed results and their .frame()
@pytest.mark.filterwarnings("ignore::mixit_lab.analysis.patching.PatchingWarning")  # an untrained model
def test_each_analysis_frame_is_its_table_with_its_fields_in_attrs():
    from mixit_lab.analysis import ablation, heads, patching

    task = get_task("khop", hops=1, length=8, alphabet=6)
    model = _khop_model(task, init_std=0.2)
    tokens, mask = task.eval_set(16)
    queries, sources = task.answer_sources(tokens)
    pairs = patching.patching_pairs(task, n=8, seed=1)

    def check(result, kind, columns, attrs):
        assert type(result) is kind
        df = result.frame()
        assert list(df.columns) == columns and len(df) == 2 * 4  # one row per (layer, head)
        # the table's values under the frame's column names (a patching table's "value" is the metric's column)
        pd.testing.assert_frame_equal(df, result.table.set_axis(columns, axis=1))
        assert df.attrs == attrs and not result.table.attrs  # frame() copies: the table itself carries no attrs

    r = heads.head_scores(model, n_seqs=4, seq_len=4)
    check(r, heads.HeadScores, heads.COLUMNS, {
        "n_seqs": 4, "seq_len": 4, "seed": 0, "chance": r.chance, "loss_by_position": r.loss_by_position,
        "loss_first_half": r.loss_first_half, "loss_second_half": r.loss_second_half,
        "in_context_drop": r.in_context_drop})
    assert len(r.loss_by_position) == 7 and r.in_context_drop == pytest.approx(r.loss_first_half - r.loss_second_half)
    r = heads.source_attention_scores(model, tokens, queries, sources)
    check(r, heads.SourceScores, heads.SOURCE_COLUMNS,
          {"chance": r.chance, "positional": r.positional, "rows": r.rows, "n_seqs": 16})
    aligned = heads.task_induction_scores(model, task, tokens)
    check(aligned, heads.SourceScores, heads.SOURCE_COLUMNS,
          {"chance": r.chance, "positional": r.positional, "rows": r.rows, "n_seqs": 16, "hops": 1})
    pd.testing.assert_frame_equal(aligned.table, r.table)  # the task's own answer sources
    r = ablation.head_ablation(model, tokens, mask, "token", method="zero")
    check(r, ablation.HeadAblation, ablation.COLUMNS, {"baseline_loss": r.baseline_loss,
          "baseline_accuracy": r.baseline_accuracy, "method": "zero", "n_examples": 16})
    r = ablation.head_ablation(model, tokens, metric=lambda logits: logits[:, -1, 0].mean(), method="zero")
    check(r, ablation.HeadAblation, ablation.METRIC_COLUMNS,
          {"baseline_metric": r.baseline_metric, "method": "zero", "n_examples": 16})
    r = patching.head_patching(model, task, n=8, seed=1)
    check(r, patching.HeadPatching, patching.COLUMNS,
          {"clean_logit_diff": r.clean, "corrupted_logit_diff": r.corrupted, "metric": "logit_diff", "n_pairs": 8})
    r = patching.patch_heads(model, pairs.clean, pairs.corrupted, metric=lambda logits: logits[:, -1, 0].mean())
    check(r, patching.HeadPatching, ["layer", "head", "restored", "metric"],
          {"clean_metric": r.clean, "corrupted_metric": r.corrupted, "metric": "<lambda>", "n_pairs": 8})
