"""Intervals over seeds: every difference a verdict reads comes with a 95% interval, and a criterion reads the
interval, not a point.

    from mixit_lab.reproduce.intervals import combination, difference, level, decide
    d = difference(mixit, standard)   # mean(mixit) - mean(standard) over seeds, with Welch's 95% t interval
    d.at_least(-5)                    # True: all of it >= -5; False: all of it below; None: it straddles -5
    decide(d.at_least(-5), level(standard).at_least(90))   # False if any fails, None if any straddles, else True

The interval of a linear combination of means of independent groups of seeds (`combination`: a difference, a
level, `standard - 1.25 x mixit`) is Welch's: Student's t with Welch-Satterthwaite degrees of freedom, unequal
variances. With fewer than two seeds in a group its spread is unknown: the interval is the point, and `one_seed`
says so (the learning-rate grid's single tuning seed reads this way). A ratio of two means (`ratio`) is read on
the log scale (the delta method) and mapped back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from scipy import stats

LEVEL = 0.95  # two-sided


@dataclass(frozen=True)
class Interval:
    """An estimate and its interval over seeds: `low` <= estimate <= `high`; `seeds` per group."""

    estimate: float
    low: float
    high: float
    seeds: tuple[int, ...]

    @property
    def one_seed(self) -> bool:
        """A group had one seed: no spread, the interval is the point."""
        return min(self.seeds, default=0) < 2

    def at_least(self, threshold: float) -> bool | None:
        """True if the whole interval is >= threshold, False if it is all below, None if it straddles it."""
        return True if self.low >= threshold else False if self.high < threshold else None

    def at_most(self, threshold: float) -> bool | None:
        return True if self.high <= threshold else False if self.low > threshold else None

    def above(self, threshold: float) -> bool | None:
        """Strictly above: True if low > threshold, False if high <= threshold, else None."""
        return True if self.low > threshold else False if self.high <= threshold else None

    def below(self, threshold: float) -> bool | None:
        return True if self.high < threshold else False if self.low >= threshold else None

    def text(self, digits: int = 1, signed: bool = True) -> str:
        """'+12.3 [+4.1, +20.5]' (or '+12.3, one seed' when there is no interval)."""
        fmt = f"{{:{'+' if signed else ''}.{digits}f}}"
        if self.one_seed:
            return fmt.format(self.estimate) + " (one seed)"
        return f"{fmt.format(self.estimate)} [{fmt.format(self.low)}, {fmt.format(self.high)}]"


def combination(groups: Sequence[Sequence[float]], weights: Sequence[float]) -> Interval:
    """sum(w_i * mean(group_i)) with Welch's interval (the groups independent: different models' seeds)."""
    groups = [[float(v) for v in g] for g in groups]
    if not groups or any(not g for g in groups):
        raise ValueError("every group needs at least one value")
    means = [sum(g) / len(g) for g in groups]
    estimate = sum(w * m for w, m in zip(weights, means))
    seeds = tuple(len(g) for g in groups)
    if min(seeds) < 2:
        return Interval(estimate, estimate, estimate, seeds)
    parts = [w * w * _variance(g) / len(g) for w, g in zip(weights, groups)]
    var = sum(parts)
    if var <= 0:
        return Interval(estimate, estimate, estimate, seeds)
    df = var * var / sum(p * p / (len(g) - 1) for p, g in zip(parts, groups) if p > 0)
    half = float(stats.t.ppf(0.5 + LEVEL / 2, df)) * math.sqrt(var)
    return Interval(estimate, estimate - half, estimate + half, seeds)


def _variance(values: list[float]) -> float:
    mean = sum(values) / len(values)
    return sum((v - mean) ** 2 for v in values) / (len(values) - 1)


def difference(a: Sequence[float], b: Sequence[float]) -> Interval:
    """mean(a) - mean(b)."""
    return combination([a, b], [1.0, -1.0])


def level(a: Sequence[float]) -> Interval:
    """mean(a) with its t interval."""
    return combination([a], [1.0])


def ratio(a: Sequence[float], b: Sequence[float]) -> Interval:
    """mean(a) / mean(b) (positive values), its interval from Welch's on log(mean a) - log(mean b) (delta method)."""
    a, b = [float(v) for v in a], [float(v) for v in b]
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    estimate = ma / mb
    seeds = (len(a), len(b))
    if min(seeds) < 2:
        return Interval(estimate, estimate, estimate, seeds)
    parts = [_variance(a) / (len(a) * ma * ma), _variance(b) / (len(b) * mb * mb)]
    var = sum(parts)
    if var <= 0:
        return Interval(estimate, estimate, estimate, seeds)
    df = var * var / sum(p * p / (n - 1) for p, n in zip(parts, seeds) if p > 0)
    half = float(stats.t.ppf(0.5 + LEVEL / 2, df)) * math.sqrt(var)
    return Interval(estimate, estimate * math.exp(-half), estimate * math.exp(half), seeds)


def decide(*outcomes: bool | None) -> bool | None:
    """All of several interval tests: False if any fails, None if any straddles its threshold, else True."""
    if any(o is False for o in outcomes):
        return False
    return None if any(o is None for o in outcomes) else True
