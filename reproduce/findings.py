"""The paper's seven findings as data: each a frozen dataclass whose fields are its thresholds.

    from mixit_lab.reproduce.findings import FINDINGS
    for finding in FINDINGS:
        finding.title, finding.criterion()      # the criterion's text, generated from the thresholds
        finding.check(tables)                   # one Claim per part (mixit_lab.reproduce.claims)

A threshold is written once, as a field's default; the check reads it and the criterion's text is
generated from it, so the two cannot disagree. A finding whose data is missing is "not measured", never
"holds". Every comparison reads a 95% interval over seeds (mixit_lab.reproduce.intervals: Welch's t for differences of
means), not a point: a part holds where every interval it reads meets its threshold, fails where one misses it
entirely, and is undecided where one straddles it. The verdicts (mixit_lab.reproduce.verdicts) read these claims against
the authors' code's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import pandas as pd

from mixit_lab.models import VARIANTS
from mixit_lab.training.tasks import TASKS

from .claims import Claim, Finding, Part, join_and, missing, numbers, pct, seed_values, stuck_note
from .intervals import Interval, combination, decide, difference, level, ratio
from mixit_lab.analysis.paper import FULL_ACCURACY
from .selection import STUCK_POINTS, lookup

RETRIEVAL_VARIANTS = ("standard", "frozen_mlp", "frozen_qk", "mixit")
KHOP_VARIANTS = ("standard", "frozen_qk", "mixit")
LM_VARIANTS = ("standard", "frozen_qk", "mixit")
MEMORIZE_VARIANTS = ("standard", "frozen_qk", "mixit", "frozen_mlp")
INTERVALS = "95% intervals over seeds (Welch's t; mixit_lab.reproduce.intervals)"
# How a verdict names a task of Table 3.
TASK_LABELS = {"addition": "addition", "dyck": "Dyck", "modadd": "modular addition", "memorize": "memorize",
               "sentiment": "sentiment"}


@dataclass(frozen=True)
class RetrievalFinding(Finding):
    """Finding 1 on Table 1: retrieval and k-hop induction need learned attention (medians over seeds)."""

    title = "Retrieval needs learned attention (Table 1)"
    preamble = (f"{INTERVALS}: a part holds where each interval meets its threshold (a seed over "
                f"{STUCK_POINTS:.0f} points below its median is named as stuck)")
    min_learned: float = 90.0  # retrieval: standard and frozen_mlp reach at least this accuracy (%)
    frozen_qk_within: float = 10.0  # retrieval: frozen_qk at most this many points below standard
    mixit_below: float = 30.0  # retrieval: mixit at least this many points below frozen_qk
    khop_standard_slack: float = 1.0  # k-hop: standard at most this many points below frozen_qk
    khop_mixit_below: float = 10.0  # k-hop: frozen_qk at least this many points above mixit

    def parts(self) -> tuple[Part, ...]:
        return (
            Part("retrieval", "retrieval",
                 f"standard and frozen_mlp >= {pct(self.min_learned)}%, frozen_qk - standard >= "
                 f"-{pct(self.frozen_qk_within)} points, frozen_qk - mixit >= {pct(self.mixit_below)} points",
                 "table1_retrieval", "retrieval", RETRIEVAL_VARIANTS),
            Part("khop", "k-hop", f"standard - frozen_qk >= -{pct(self.khop_standard_slack)} and frozen_qk - mixit >= "
                 f"{pct(self.khop_mixit_below)} points", "table1_retrieval", "khop", KHOP_VARIANTS),
        )

    def check(self, tables: dict[str, pd.DataFrame]) -> list[Claim]:
        t1 = tables["table1_retrieval"]
        ret, kh = t1[t1["task"].str.startswith("retrieval")], t1[t1["task"].str.startswith("khop")]
        acc = {v: seed_values(ret, variant=v) for v in RETRIEVAL_VARIANTS}
        if any(a is None for a in acc.values()):
            absent = [f"retrieval/{v}" for v, a in acc.items() if a is None]
            claims = [Claim("retrieval", "retrieval " + missing(*absent), None)]
        else:
            std, fmlp = level(acc["standard"]), level(acc["frozen_mlp"])
            qk_gap, mixit_gap = difference(acc["frozen_qk"], acc["standard"]), difference(acc["frozen_qk"], acc["mixit"])
            outcome = decide(std.at_least(self.min_learned), fmlp.at_least(self.min_learned),
                             qk_gap.at_least(-self.frozen_qk_within), mixit_gap.at_least(self.mixit_below))
            text = (f"retrieval {numbers(_means(acc))}; standard {std.text(signed=False)}, frozen_mlp "
                    f"{fmlp.text(signed=False)}, frozen_qk - standard {qk_gap.text()}, frozen_qk - mixit "
                    f"{mixit_gap.text()}" + stuck_note(ret, RETRIEVAL_VARIANTS))
            claims = [Claim.judged("retrieval", text, outcome)]
        kacc = {v: seed_values(kh, variant=v) for v in KHOP_VARIANTS}
        if any(a is None for a in kacc.values()):
            return [*claims, Claim("khop", "k-hop not measured", None)]
        slack, gap = difference(kacc["standard"], kacc["frozen_qk"]), difference(kacc["frozen_qk"], kacc["mixit"])
        outcome = decide(slack.at_least(-self.khop_standard_slack), gap.at_least(self.khop_mixit_below))
        text = (f"k-hop {numbers(_means(kacc))}; standard - frozen_qk {slack.text()}, frozen_qk - mixit {gap.text()}"
                + stuck_note(kh, KHOP_VARIANTS))
        return [*claims, Claim.judged("khop", text, outcome)]


def _means(values: dict[str, list[float]]) -> dict[str, float]:
    return {k: sum(v) / len(v) for k, v in values.items()}


@dataclass(frozen=True)
class LanguageModelFinding(Finding):
    """Finding 2 on Table 2: validation log-perplexity ordered standard < frozen_qk < mixit, frozen_qk close
    to standard."""

    title = "Language modeling ordering (Table 2)"
    frozen_qk_share: float = 0.5  # frozen_qk - standard below this share of mixit - standard

    preamble = INTERVALS

    def parts(self) -> tuple[Part, ...]:
        return (Part("lm", "language modeling", "log-ppl frozen_qk - standard > 0, mixit - frozen_qk > 0, and "
                     f"(frozen_qk - standard) - {pct(self.frozen_qk_share)} x (mixit - standard) < 0", "table2_lm", "lm",
                     LM_VARIANTS),)

    def check(self, tables: dict[str, pd.DataFrame]) -> list[Claim]:
        lp = {v: seed_values(tables["table2_lm"], "log_ppl_values", variant=v) for v in LM_VARIANTS}
        if any(x is None for x in lp.values()):
            return [Claim("lm", missing("language-modeling runs"), None)]
        s, q, m = lp["standard"], lp["frozen_qk"], lp["mixit"]
        share = self.frozen_qk_share
        qk_cost, mixit_cost = difference(q, s), difference(m, q)
        close = combination([q, s, m], [1.0, share - 1.0, -share])  # (q - s) - share (m - s)
        outcome = decide(qk_cost.above(0), mixit_cost.above(0), close.below(0))
        text = (f"log-ppl {numbers(_means(lp), 3)}; frozen_qk - standard {qk_cost.text(3)}, mixit - frozen_qk "
                f"{mixit_cost.text(3)}, (frozen_qk - standard) - {pct(share)} x (mixit - standard) {close.text(3)}")
        return [Claim.judged("lm", text, outcome)]


@dataclass(frozen=True)
class AlgorithmicFinding(Finding):
    """Finding 3 on Table 3, per task and one-sided: the paper's claim is that MixiT is not worse than
    standard, so a MixiT better than standard passes.

    A task is measured only where the comparison can resolve the margin: its held-out set must make one item
    worth at most `max_item_points` (27 held-out pairs of modular addition mod 23 were 3.7 points each, so
    one pair could move a verdict), and for a task whose held-out set is its training set (memorize), one of
    the two variants must fail to store every item (a set both store completely cannot tell them apart)."""

    title = "MixiT matches standard on algorithmic tasks (Table 3)"
    margin: float = 5.0  # points: mixit >= standard - margin
    max_item_points: float = 1.0  # one held-out item is worth at most this many points (>= 100 items)
    tasks: tuple[str, ...] = ("addition", "dyck", "modadd", "memorize", "sentiment")

    def parts(self) -> tuple[Part, ...]:
        return tuple(Part(task, TASK_LABELS.get(task, task), f"mixit - standard >= -{pct(self.margin)} points",
                          "table3_tasks", task, ("standard", "mixit")) for task in self.tasks)

    def criterion(self) -> str:
        stored = [t for t in self.tasks if t in TASKS and TASKS[t].eval_is_train]
        text = (f"per task, {INTERVALS}: mixit - standard >= -{pct(self.margin)} points on "
                f"{join_and(list(self.tasks))}; a task is measured only with >= {100 / self.max_item_points:.0f} "
                "held-out items")
        return text + (f", and a {join_and(stored)} set only where standard or mixit does not store every key"
                       if stored else "")

    def check(self, tables: dict[str, pd.DataFrame]) -> list[Claim]:
        return [self._task(tables["table3_tasks"], task) for task in self.tasks]

    def _task(self, t3: pd.DataFrame, task: str) -> Claim:
        """One task's claim."""
        rows = t3[t3["task"].str.split("(").str[0] == task] if len(t3) else t3
        sv, mv = seed_values(rows, variant="standard"), seed_values(rows, variant="mixit")
        if sv is None or mv is None:
            return Claim(task, f"{task} not measured", None)
        s, m = sum(sv) / len(sv), sum(mv) / len(mv)
        gap = difference(mv, sv)
        text = f"{task} {s:.1f} vs {m:.1f}, mixit - standard {gap.text()}" + stuck_note(rows, ("standard", "mixit"))
        items = rows["eval_items"].dropna() if "eval_items" in rows else pd.Series(dtype=float)
        if len(items) and 100 / items.min() > self.max_item_points:
            n = int(items.min())
            return Claim(task, f"{text}, not measured: {n} held-out items, {100 / n:.1f} points each", None)
        if task in TASKS and TASKS[task].eval_is_train and min(s, m) >= FULL_ACCURACY:
            return Claim(task, f"{text}, not measured: both store every key", None)
        return Claim.judged(task, text, gap.at_least(-self.margin))


@dataclass(frozen=True)
class MemorizationFinding(Finding):
    """Finding 4 on Table 4, in two regimes (mixit_lab.reproduce.tables.memorize_regimes).

    The paper's Table 4 is a fixed dataset that standard memorizes completely (their 512^2 keys of 9 bits,
    2,359,296 bits, by a model of 790,400 trainable parameters: exactly their 2.98 bits per parameter), so its
    bits per parameter measure the data as much as the models; capacity is measured where the models run out
    of it: a model that stores the whole largest dataset stored what it was given (a lower bound), and bits
    that still grow, or fall, with the dataset size have not reached the plateau that a capacity is. Both
    regimes are judged by the paper's ordering, "standard above" only beyond the seed spread (the two standard
    deviations added): at capacity standard's 1.65 against frozen_qk's 1.62 (spread 0.04) is no ordering."""

    title = "Memorization (Table 4)"
    close_ratio: float = 1.25  # frozen_qk and mixit within 25% of each other
    capacity_max_accuracy: float = 0.99  # at capacity: accuracy at the largest n below this
    capacity_plateau: float = 0.10  # at capacity: bits at the two largest n within 10% of the larger

    def criterion(self) -> str:
        ordering = (f"in each regime, {INTERVALS}, bits per trainable parameter ordered as the paper's: standard - "
                    "frozen_qk > 0 and standard - mixit > 0, frozen_qk - frozen_mlp > 0 and mixit - frozen_mlp > 0, and "
                    f"frozen_qk and mixit within {100 * (self.close_ratio - 1):.0f}% of each other (frozen_qk - "
                    f"{self.close_ratio:g} x mixit <= 0 and mixit - {self.close_ratio:g} x frozen_qk <= 0)")
        return ordering + ". " + ". ".join(f"{p.label[0].upper()}{p.label[1:]}: {p.criterion}" for p in self.parts())

    def parts(self) -> tuple[Part, ...]:
        return (
            Part("paper regime", "the paper's regime", "the largest dataset size that standard stores completely",
                 "table4_memorize", "memorize", MEMORIZE_VARIANTS),
            Part("at capacity", "the capacity regime", f"for every variant, accuracy at the largest n < "
                 f"{100 * self.capacity_max_accuracy:g}% and bits per trainable parameter within "
                 f"{100 * self.capacity_plateau:g}% of those at the next smaller n",
                 "table4_memorize_sizes", "memorize", MEMORIZE_VARIANTS),
        )

    def check(self, tables: dict[str, pd.DataFrame]) -> list[Claim]:
        t4, sizes = tables["table4_memorize"], tables["table4_memorize_sizes"]
        return [self._regime(t4, sizes, "fixed", "paper regime"), self._regime(t4, sizes, "capacity", "at capacity")]

    def _regime(self, t4: pd.DataFrame, sizes: pd.DataFrame, regime: str, label: str) -> Claim:
        """One regime's claim (`label` names it)."""
        rows = t4[t4["regime"] == regime] if "regime" in t4 else t4.iloc[0:0]
        b = {v: seed_values(rows, "bits_per_trainable_param_values", variant=v) for v in MEMORIZE_VARIANTS}
        absent = [v for v, x in b.items() if x is None]
        if regime == "fixed" and absent:
            return Claim(label, f"{label} not measured (no dataset size that standard stores completely with every "
                                "variant trained)", None)
        if absent:
            return Claim(label, f"{label} " + missing(*[f"memorize/{v}" for v in absent]), None)
        bits = "bits/param " + numbers(_means(b), 2)
        if regime == "capacity":
            problems = self.capacity_problems(sizes)
            if problems:
                return Claim(label, f"{label} not measured ({', '.join(problems)}); {bits}", None)
            text = f"{label}: {bits}"
        else:
            text = f"{label} (n={int(rows['n'].iloc[0])}, standard stores every key): {bits}"
        outcome, note = self._ordering(b)
        return Claim.judged(label, f"{text}; {note}", outcome)

    def _ordering(self, b: dict[str, list[float]]) -> tuple[bool | None, str]:
        """The paper's bits ordering, each comparison read on its interval over seeds; the intervals as text."""
        gaps = {"standard - frozen_qk": difference(b["standard"], b["frozen_qk"]),
                "standard - mixit": difference(b["standard"], b["mixit"]),
                "frozen_qk - frozen_mlp": difference(b["frozen_qk"], b["frozen_mlp"]),
                "mixit - frozen_mlp": difference(b["mixit"], b["frozen_mlp"])}
        r = self.close_ratio
        close = [combination([b["frozen_qk"], b["mixit"]], [1.0, -r]), combination([b["mixit"], b["frozen_qk"]], [1.0, -r])]
        outcome = decide(*(g.above(0) for g in gaps.values()), *(c.at_most(0) for c in close))
        return outcome, ", ".join(f"{name} {g.text(3)}" for name, g in gaps.items())

    def capacity_problems(self, sizes: pd.DataFrame, variants: tuple[str, ...] = MEMORIZE_VARIANTS) -> list[str]:
        """Why the memorization runs of `variants` do not show capacity ([] = every variant at capacity).

        Per variant (means over seeds per n): at least two dataset sizes; accuracy at the largest n below
        `capacity_max_accuracy`; bits per trainable parameter at the largest and next smaller n within
        `capacity_plateau` of the larger of the two. Per parameter, because the task's vocabulary, and with it
        the embedding and unembedding, grows with n: a model at capacity stores more bits at a larger n only
        because it has more parameters."""
        problems = []
        for v in variants:
            per_n = sizes[sizes["variant"] == v].groupby("n")[["accuracy", "bits_per_trainable_param"]].mean()
            if len(per_n) < 2:
                problems.append(f"{v} trained on {len(per_n)} dataset size, a plateau needs 2")
                continue
            (n_prev, prev), (n_last, last) = per_n.sort_index().iloc[-2:].iterrows()
            if last["accuracy"] >= self.capacity_max_accuracy:
                problems.append(f"{v} memorizes {100 * last['accuracy']:.1f}% at n={n_last}")
            bpp, bpp_prev = last["bits_per_trainable_param"], prev["bits_per_trainable_param"]
            change = (bpp - bpp_prev) / max(bpp, bpp_prev, 1e-12)
            if abs(change) > self.capacity_plateau:
                problems.append(f"{v} bits per parameter {'grow' if change > 0 else 'fall'} {100 * abs(change):.0f}% "
                                f"from n={n_prev} to n={n_last}")
        return problems


@dataclass(frozen=True)
class DepthFinding(Finding):
    """Finding 5 on Tables 6 and 7: the random transformer collapses with depth, MixiT holds. The covariance
    verdict is on MixiT as the authors build it, with a sink head in every layer; a control without them
    (e.g. "mixit, no sink") is reported beside it and does not change it."""

    title = "Depth: random collapses, MixiT holds (Tables 6, 7)"
    random_min_loss: float = 30.0  # addition: random loses at least this many points, shallowest to deepest
    mixit_max_loss: float = 10.0  # addition: mixit loses at most this many points
    random_min_growth: float = 10.0  # last-layer covariance at init grows at least this many times for random
    mixit_max_growth: float = 2.0  # ... and at most this many times for mixit

    def parts(self) -> tuple[Part, ...]:
        return (
            Part("depth accuracy", "depth accuracy", f"addition from the shallowest to the deepest model: random "
                 f"loses >= {pct(self.random_min_loss)} points, mixit <= {pct(self.mixit_max_loss)}",
                 "table6_depth", "addition", ("random", "mixit")),
            Part("covariance at init", "the covariance at init", f"last-layer token covariance at init grows >= "
                 f"{pct(self.random_min_growth)}x for random and <= {pct(self.mixit_max_growth)}x for mixit with its "
                 "sink heads (the authors' model)", "table7_signal", None, ("random", "mixit")),
        )

    def criterion(self) -> str:
        return f"{INTERVALS} (the growth's on its log scale); " + "; ".join(p.criterion for p in self.parts())

    def check(self, tables: dict[str, pd.DataFrame]) -> list[Claim]:
        return [self._accuracy(tables["table6_depth"]), self._covariance(tables["table7_signal"])]

    def _accuracy(self, t6: pd.DataFrame) -> Claim:
        """Accuracy lost from the shallowest to the deepest model, random against mixit."""
        if not (len(t6) and {"random", "mixit"} <= set(t6["variant"])):
            return Claim("depth accuracy", "depth accuracy not measured", None)
        lo, hi = t6["n_layers"].min(), t6["n_layers"].max()
        r_lo, r_hi = seed_values(t6, variant="random", n_layers=lo), seed_values(t6, variant="random", n_layers=hi)
        m_lo, m_hi = seed_values(t6, variant="mixit", n_layers=lo), seed_values(t6, variant="mixit", n_layers=hi)
        if any(v is None for v in (r_lo, r_hi, m_lo, m_hi)):
            return Claim("depth accuracy", "depth accuracy not measured", None)
        where = ""
        if {"d_model", "steps"} <= set(t6):
            widths = "/".join(str(int(w)) for w in sorted(t6["d_model"].dropna().unique()))
            steps = "/".join(f"{int(s):,}" for s in sorted(t6["steps"].dropna().unique()))
            where = f" (width {widths}, {steps} steps)"
        random_loss, mixit_loss = difference(r_lo, r_hi), difference(m_lo, m_hi)
        outcome = decide(random_loss.at_least(self.random_min_loss), mixit_loss.at_most(self.mixit_max_loss))
        mean = lambda v: sum(v) / len(v)  # noqa: E731
        return Claim.judged("depth accuracy", f"addition {lo}->{hi} layers{where}: random {mean(r_lo):.1f}->"
                            f"{mean(r_hi):.1f} (loses {random_loss.text()}), mixit {mean(m_lo):.1f}->{mean(m_hi):.1f} "
                            f"(loses {mixit_loss.text()})", outcome)

    def _covariance(self, t7: pd.DataFrame) -> Claim:
        """Growth of the last layer's token covariance at init with depth, random against mixit."""
        if not (len(t7) and {"random", "mixit"} <= set(t7["variant"])):
            return Claim("covariance at init", "covariance not measured", None)
        growth = {v: _growth(t7[t7["variant"] == v].sort_values("depth")) for v in ("random", "mixit")}
        lo, hi = t7["depth"].min(), t7["depth"].max()
        widths = "/".join(str(int(w)) for w in sorted(t7["d_model"].dropna().unique())) if "d_model" in t7 else "?"
        text = (f"covariance growth depth {lo}->{hi} at width {widths}: random x{growth['random'].text(1, False)}, "
                f"mixit (with sink heads, as the authors' model) x{growth['mixit'].text(1, False)}")
        for label in sorted(set(t7["variant"]) - set(VARIANTS)):
            rows = t7[t7["variant"] == label].sort_values("depth")
            text += f" ({label}: covariance {rows['covariance'].iloc[0]:.2g} -> {rows['covariance'].iloc[-1]:.2g})"
        outcome = decide(growth["random"].at_least(self.random_min_growth),
                         growth["mixit"].at_most(self.mixit_max_growth))
        return Claim.judged("covariance at init", text, outcome)


def _growth(rows: pd.DataFrame) -> Interval:
    """The covariance's growth from the shallowest to the deepest model (rows sorted by depth), with its interval
    over the signal stage's seeds where their spread was recorded (covariance_std, n_seeds), else the point."""
    first, last = rows.iloc[0], rows.iloc[-1]
    if {"covariance_std", "n_seeds"} <= set(rows) and pd.notna(first["covariance_std"]) and int(first["n_seeds"]) > 1:
        return ratio(_spread_values(last), _spread_values(first))
    return ratio([float(last["covariance"])], [float(first["covariance"])])


def _spread_values(row: pd.Series) -> list[float]:
    """n values with the row's mean and population standard deviation (the signal stage records those of its n seeds,
    not each seed's value): Welch's interval reads only a group's size, mean and variance, so these stand for the
    seeds exactly."""
    n, mean, sd = int(row["n_seeds"]), float(row["covariance"]), float(row["covariance_std"])
    offsets = [(i - (n - 1) / 2) for i in range(n)]
    scale = math.sqrt(sum(o * o for o in offsets) / n)
    return [mean + sd * o / scale for o in offsets] if scale else [mean] * n


@dataclass(frozen=True)
class InductionFinding(Finding):
    """Finding 6 on the task-aligned score (mixit_lab.analysis.heads.task_induction_scores) of each seed's top head, read over
    seeds as intervals.

    Why these thresholds:
    * Above chance both ways: with long rows chance is tiny (~0.007 at length 96), so a ratio alone would
      accept a head putting 2% of its attention on the source; with short rows chance is large, so a margin
      alone would accept little more than uniform attention. Both together ask for a visible share.
    * Above the shuffled-source score by the margin: attention at a typical offset beats chance without
      reading any token (at length 16, alphabet 6 the positional ceiling is 0.27, 3.6x chance, and a 2-layer
      frozen_qk model's top head scores 0.163 on its own sources and 0.164 on other sequences'). An induction
      head's attention follows the tokens (a 3-layer frozen_qk model's lookup head: 0.86 against 0.14).
    * Ablation costs points: the head is used for the task, not only attending there.
    * mixit below 2x chance: its patterns are fixed random matrices (I + zero-mean noise), whose expected mass
      on a source is about 0; 2x leaves room for the noise of the best of many heads."""

    title = "Induction heads need learned attention"
    min_ratio: float = 3.0  # frozen_qk: score >= this x chance ...
    min_margin: float = 0.1  # ... and >= chance + this, and >= its shuffled-source score + this
    min_drop: float = 10.0  # frozen_qk: mean-ablating that head costs >= this many points of accuracy
    mixit_max_ratio: float = 2.0  # mixit: top score < this x chance

    def parts(self) -> tuple[Part, ...]:
        return (Part("induction", "induction", f"{INTERVALS}, each seed's k-hop run scored on its own inputs: "
                     "frozen_qk's head with the most attention on the answer's source scores >= "
                     f"{pct(self.min_ratio)}x chance, >= chance + {pct(self.min_margin)} and >= its score on shuffled "
                     f"sources + {pct(self.min_margin)}, and mean-ablating it costs >= {pct(self.min_drop)} points of "
                     f"accuracy; mixit's top score < {pct(self.mixit_max_ratio)}x chance", "induction", None,
                     ("frozen_qk", "mixit")),)

    def check(self, tables: dict[str, pd.DataFrame]) -> list[Claim]:
        ind = tables["induction"]
        q, m = _induction_rows(ind, "frozen_qk"), _induction_rows(ind, "mixit")
        if q is None or m is None:
            return [Claim("induction", missing(*[f"task-aligned induction of an analysed {v} k-hop run"
                                                 for v, r in (("frozen_qk", q), ("mixit", m)) if r is None]), None)]
        if q["ablation_drop"].isna().any() or q["task_shuffled"].isna().any():
            what = "ablation result" if q["ablation_drop"].isna().any() else "shuffled-source control"
            return [Claim("induction", missing(f"frozen_qk's {what}"), None)]
        score, chance = q["task_score"].tolist(), q["task_chance"].tolist()
        times_chance = level([a / c for a, c in zip(score, chance)])
        over_chance = level([a - c for a, c in zip(score, chance)])
        over_shuffled = level([a - b for a, b in zip(score, q["task_shuffled"])])  # paired: the same head
        drop = level(q["ablation_drop"].tolist())
        mixit_ratio = level([a / c for a, c in zip(m["task_score"], m["task_chance"])])
        outcome = decide(times_chance.at_least(self.min_ratio), over_chance.at_least(self.min_margin),
                         over_shuffled.at_least(self.min_margin), drop.at_least(self.min_drop),
                         mixit_ratio.below(self.mixit_max_ratio))
        best, mbest = q.iloc[0], m.iloc[0]
        text = (f"task-aligned top head over {len(q)} frozen_qk seed(s) (best {best['task_head']}, {best['task_score']:.3f}): "
                f"score / chance {times_chance.text(2, False)}, score - chance {over_chance.text(3)}, score - shuffled "
                f"sources {over_shuffled.text(3)}, ablating it costs {drop.text(1, False)} points; mixit over "
                f"{len(m)} seed(s) (best {mbest['task_head']}, {mbest['task_score']:.3f}): score / chance "
                f"{mixit_ratio.text(2, False)}")
        if pd.notna(best.get("repeat_score")) and pd.notna(mbest.get("repeat_score")):
            text += (f"; repeated tokens: frozen_qk {best['repeat_score']:.2f}, mixit {mbest['repeat_score']:.2f} "
                     f"(chance {best['repeat_chance']:.2f})")
        return [Claim.judged("induction", text, outcome)]


def _induction_rows(ind: pd.DataFrame, variant: str) -> pd.DataFrame | None:
    """The variant's rows of the induction table with a task-aligned score (one per seed, its best first), or None."""
    rows = ind[(ind["variant"] == variant) & ind["task_score"].notna()] if len(ind) else ind
    return rows.reset_index(drop=True) if len(rows) else None


@dataclass(frozen=True)
class SpeedFinding(Finding):
    """Finding 7 against the speed stage's own noise: it times every variant in turn, block by block, and a
    saving counts only where the 95% interval of the per-block savings lies above 0 (across six runs of the
    quick preset frozen_qk's saving ranged from 8.4% slower to 9.7% faster, so a positive point is not enough)."""

    title = "Frozen QK and MixiT train faster"
    variants: tuple[str, ...] = ("frozen_qk", "mixit")

    def parts(self) -> tuple[Part, ...]:
        return tuple(Part(v, v, "per-sample training time saved against standard > 0, its interval over the speed "
                          "stage's timed blocks", "speed", None, (v,)) for v in self.variants)

    def criterion(self) -> str:
        return (f"per-sample training time saved against standard, for {' and for '.join(self.variants)}: > 0 on "
                "its 95% interval over the speed stage's timed blocks (each block times every variant in turn)")

    def check(self, tables: dict[str, pd.DataFrame]) -> list[Claim]:
        sp = tables["speed"]
        claims = []
        for v in self.variants:
            faster = lookup(sp, "faster_pct", variant=v)
            blocks = seed_values(sp, "faster_pct_values", variant=v) if "faster_pct_values" in sp else None
            if faster is None:
                claims.append(Claim(v, f"{v} " + missing("speed measurement"), None))
            elif not blocks or len(blocks) < 2:
                claims.append(Claim(v, f"{v} {faster:.1f}% faster, not measured: no timed blocks recorded", None))
            else:
                saved = level(blocks)
                claims.append(Claim.judged(v, f"{v} saves {saved.text()}% per sample over {len(blocks)} timed blocks "
                                              f"(median {faster:.1f}%)", saved.above(0)))
        return claims


FINDINGS: tuple[Finding, ...] = (RetrievalFinding(), LanguageModelFinding(), AlgorithmicFinding(),
                                 MemorizationFinding(), DepthFinding(), InductionFinding(), SpeedFinding())
