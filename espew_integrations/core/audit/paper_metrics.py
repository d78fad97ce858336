"""The paper's own metrics (KS p-value, delta cos, delta l2), for comparability only.

Why apart from the decision: they are reported on the audit's probes so that a
reader can set a verdict beside the paper's tables, but the paper's probe-level
KS test treats probes that share trigger words as independent, so these figures
never decide a verdict.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["paper_metrics"]


def paper_metrics(
    cosines: np.ndarray, owner: np.ndarray, is_trigger: np.ndarray
) -> dict[str, float]:
    """KS p-value, delta cos and delta l2 (paper, "Watermark Verification").

    Computed on our probes: trigger-word probes play D_b, other band-word probes
    D_n. l2 is the squared distance of unit vectors, ||u - t||^2 = 2 - 2 cos,
    which is what makes the paper's tables read delta_l2 = -2 delta_cos.
    """
    valid = np.isfinite(cosines)
    backdoor = valid & is_trigger[owner]
    benign = valid & ~is_trigger[owner]
    if not backdoor.any() or not benign.any():
        return {"ks_p_value": math.nan, "delta_cos": math.nan, "delta_l2": math.nan}
    from scipy.stats import ks_2samp  # the paper's statistic; scipy.stats loads only when needed

    ks = ks_2samp(cosines[backdoor], cosines[benign], alternative="two-sided")
    squared_l2 = 2.0 - 2.0 * cosines
    return {
        "ks_p_value": float(ks.pvalue),
        "delta_cos": float(cosines[backdoor].mean() - cosines[benign].mean()),
        "delta_l2": float(squared_l2[backdoor].mean() - squared_l2[benign].mean()),
    }
