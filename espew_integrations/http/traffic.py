"""Offering answered texts to a :class:`~..core.records.traffic_sample.TrafficSample` from a server.

Why one place: ``espew serve`` and :class:`~.middleware.ESpeWMiddleware` both
record what they answered, under the account the request's credential names,
and merge the sample into its file when due, off the event loop; a failing
write must be logged, never become the client's error.
"""

from __future__ import annotations

import asyncio
import logging

from ..core.records.traffic_sample import TrafficSample

__all__ = ["credential_account", "sample_answered"]

#: After the first, a refusal is logged again each time this many more texts were refused.
_REFUSAL_LOG_EVERY = 100_000


def credential_account(sample: TrafficSample, authorization: str | bytes | None) -> str:
    """The sample account of a request with this ``Authorization`` header.

    Why from the credential: without a key ring every client would share one
    reservoir, and one client's junk would push out everyone's texts. The
    bearer token (or the whole header, for another scheme) is hashed under the
    sample's salt (:meth:`TrafficSample.account_for`), never stored; no header
    gives the shared anonymous account.
    """
    if isinstance(authorization, bytes):
        authorization = authorization.decode("latin-1")
    credential = (authorization or "").strip()
    scheme, _, token = credential.partition(" ")
    if scheme.lower() == "bearer":
        credential = token.strip()
    return sample.account_for(credential or None)


async def sample_answered(
    sample: TrafficSample, texts: list[str], account: str | None, logger: logging.Logger
) -> None:
    """Offer ``texts`` to ``account``'s sample; when a flush is due, write it in a thread.

    The answer was already computed, so a write that fails is logged on ``logger``
    and retried at the next due flush. Texts refused because the whole sample is
    full are logged too (the first time, then now and then): the operator sizes
    ``max_file_bytes``.
    """
    before = sample.refused
    sample.record(texts, account)
    after = sample.refused
    if after > before and (
        before == 0 or before // _REFUSAL_LOG_EVERY != after // _REFUSAL_LOG_EVERY
    ):
        logger.warning(
            "the traffic sample %s is full (%d bytes): %d texts of new accounts were not "
            "sampled; raise its file cap (--traffic-sample-file-bytes) or lower the "
            "per-account cap",
            sample.path,
            sample.max_file_bytes,
            after,
        )
    if sample.flush_due():
        try:
            await asyncio.to_thread(sample.flush)
        except (OSError, ValueError) as exc:
            logger.error("could not write the traffic sample %s: %s", sample.path, exc)
