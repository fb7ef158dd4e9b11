"""The one percentile of the Python benchmarks (the C ones: stats.c)."""
import math


def pct(xs, p):
    """Nearest rank: the ceil(p/100 * n)-th smallest of xs (p99 of 100 values
    is the 99th, not the largest); nan for no values."""
    xs = sorted(xs)
    if not xs:
        return float("nan")
    k = max(0, min(len(xs) - 1, math.ceil(p / 100.0 * len(xs) - 1e-9) - 1))
    return xs[k]
