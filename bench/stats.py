"""Statistics and plots for benchmark rounds: mean, spread, 95% CI, paired ratios."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Summary", "summarise", "paired_ratio", "bar_chart", "line_chart"]


_T_TABLE = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
    2.040, 2.037, 2.035, 2.032, 2.030, 2.028, 2.026, 2.024, 2.023, 2.021,
)  # fmt: skip


def _t_critical(df: int) -> float:
    """Two-sided 95% Student's t critical value."""
    try:
        from scipy.stats import t  # type: ignore[import-untyped]
    except ImportError:
        # two-sided 95% values for df 1..40; past 40 the df=40 value errs on the wide side (by at most 3%)
        return _T_TABLE[min(df, len(_T_TABLE)) - 1]
    return float(t.ppf(0.975, df))


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    std: float
    ci_low: float
    ci_high: float

    @property
    def half_width(self) -> float:
        return (self.ci_high - self.ci_low) / 2


def summarise(values: Sequence[float]) -> Summary:
    """Mean, sample standard deviation and the 95% confidence interval of the mean."""
    n = len(values)
    if n == 0:
        return Summary(0, math.nan, math.nan, math.nan, math.nan)
    mean = statistics.fmean(values)
    if n == 1:
        return Summary(1, mean, 0.0, mean, mean)
    std = statistics.stdev(values)
    half = _t_critical(n - 1) * std / math.sqrt(n)
    return Summary(n, mean, std, mean - half, mean + half)


def paired_ratio(numerators: Sequence[float], denominators: Sequence[float]) -> Summary:
    """Statistics of the per-round ratios (rounds are interleaved, so they pair)."""
    ratios = [a / b for a, b in zip(numerators, denominators, strict=True) if b > 0]
    return summarise(ratios)


def median(values: Sequence[float]) -> float:
    """The median of the values that are numbers (NaN marks a run that measured nothing)."""
    numbers = [v for v in values if not math.isnan(v)]
    return statistics.median(numbers) if numbers else math.nan


def bar_chart(
    path: Path, title: str, groups: list[str], series: dict[str, list[Summary]], ylabel: str, xlabel: str | None = None
) -> bool:
    """Grouped bars with 95% CI error bars; False when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(max(6, 1.8 * len(groups) * len(series) / 2), 4.5))
    width = 0.8 / max(1, len(series))
    for i, (name, summaries) in enumerate(series.items()):
        xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
        means = [s.mean for s in summaries]
        errors = [s.half_width for s in summaries]
        ax.bar(xs, means, width, yerr=errors, capsize=3, label=name)
    ax.set_xticks(range(len(groups)), groups, rotation=20, ha="right")
    if xlabel:
        ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def line_chart(
    path: Path,
    title: str,
    xs: list[float],
    series: dict[str, list[Summary]],
    xlabel: str,
    ylabel: str,
    log_x: bool,
    y_format: Callable[[float], str] | None = None,
    log_y: bool = False,
) -> bool:
    """One line per series, with 95% CI error bars where its rounds give a spread; False when matplotlib is missing.

    A series of single figures (a median over the rounds) is drawn without
    error bars, so that its legend does not show bars that are not there.
    ``y_format`` writes the y axis' values (a latency in µs or ms, its unit on
    each tick); ``log_y`` spreads values of several orders of magnitude.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, summaries in series.items():
        means = [s.mean for s in summaries]
        if any(s.n > 1 for s in summaries):
            ax.errorbar(xs, means, yerr=[s.half_width for s in summaries], marker="o", capsize=3, label=name)
        else:
            ax.plot(xs, means, marker="o", label=name)
    if log_x:  # ticks at the levels measured (10, 100, 1000), not at 2×10¹, 3×10¹…
        ax.set_xscale("log")
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.xaxis.set_minor_locator(NullLocator())
    lows = [s.ci_low for summaries in series.values() for s in summaries if not math.isnan(s.ci_low)]
    if log_y:  # ticks at 1, 2 and 5 of each decade: a decade alone leaves two or three
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    elif lows and min(lows) >= 0:  # a count, a rate or a time: its axis starts at 0, not below
        ax.set_ylim(bottom=0)
    if y_format is not None:
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: y_format(value)))
        ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
