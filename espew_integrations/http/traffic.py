"""Offering answered texts to a :class:`~..core.traffic_sample.TrafficSample` from a server.

Why one place: ``espew serve`` and :class:`~.middleware.ESpeWMiddleware` both
record what they answered and merge the sample into its file when due, off the
event loop; a failing write must be logged, never become the client's error.
"""

from __future__ import annotations

import asyncio
import logging

from ..core.traffic_sample import TrafficSample

__all__ = ["sample_answered"]


async def sample_answered(
    sample: TrafficSample, texts: list[str], account: str | None, logger: logging.Logger
) -> None:
    """Offer ``texts`` to ``account``'s sample; when a flush is due, write it in a thread.

    The answer was already computed, so a write that fails is logged on ``logger``
    and retried at the next due flush.
    """
    sample.record(texts, account)
    if sample.flush_due():
        try:
            await asyncio.to_thread(sample.flush)
        except (OSError, ValueError) as exc:
            logger.error("could not write the traffic sample %s: %s", sample.path, exc)
