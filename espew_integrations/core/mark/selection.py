"""Which coordinates a mark writes: each row's ``k`` smallest ``|e_o|``, or a keyed hash.

The selection half of the ESpeW equations (:mod:`.inject` writes the mark): exact
partial selections on the float bits (an integer partition of the magnitudes'
bit patterns, ties to the lower index), and the keyed "Random Selection" of the
paper, seeded by an HMAC of each row.
"""

from __future__ import annotations

import hashlib
import hmac
from functools import lru_cache

import numpy as np

__all__ = [
    "MAGNITUDE_BITS",
    "hashed_mask",
    "k_lowest_mask",
    "kth_lowest",
    "magnitude_bits",
    "mask_from_kth",
    "selection_words",
    "smallest_mask",
]

#: |x| compared through the float's bit pattern: for non-negative finite
#: IEEE floats the order of the bits read as signed integers is the order of the
#: values, and integer partitions run about twice as fast as float ones.
MAGNITUDE_BITS: dict[np.dtype, np.dtype] = {
    np.dtype(np.float32): np.dtype(np.int32),
    np.dtype(np.float64): np.dtype(np.int64),
}
_SIGN_CLEAR = {
    np.dtype(np.int32): np.int32(0x7FFFFFFF),
    np.dtype(np.int64): np.int64(0x7FFFFFFFFFFFFFFF),
}


def magnitude_bits(clean: np.ndarray, out: np.ndarray) -> np.ndarray:
    """|clean| as order-preserving integers (the float bits with the sign cleared)."""
    return np.bitwise_and(clean.view(out.dtype), _SIGN_CLEAR[out.dtype], out=out)


def smallest_mask(
    clean: np.ndarray, k: int, magnitude: np.ndarray, scratch: np.ndarray, mask: np.ndarray
) -> None:
    """Fill ``mask`` with the k smallest |e_o| per row; ties go to the lower index.

    ``magnitude`` and ``scratch`` are integer buffers of the same shape (int32
    for float32 rows, int64 for float64 rows).
    """
    k_lowest_mask(magnitude_bits(clean, magnitude), k, scratch, mask)


def k_lowest_mask(mag_bits: np.ndarray, k: int, scratch: np.ndarray, mask: np.ndarray) -> None:
    """Fill ``mask`` with each row's k lowest ``mag_bits``; ties go to the lower index."""
    d = mag_bits.shape[1]
    if k <= 0 or k >= d:
        mask[...] = k >= d
        return
    kth, tied = kth_lowest(mag_bits, k, scratch)
    mask_from_kth(mag_bits, kth, tied, k, mask)


def kth_lowest(mag_bits: np.ndarray, k: int, scratch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's k-th lowest key (shape (n, 1)) and the rows with ties at it (0 < k < d).

    A value partition of a copy of the mag_bits in ``scratch`` (not an argsort,
    not an index partition) that puts each row's (k+1)-th lowest key at index k
    and the k lowest left of it, so the k-th lowest is the maximum of those k
    (a reduction over the short side of the row). ``key <= kth`` then selects
    exactly k positions except where the (k+1)-th lowest equals the k-th: the
    tied rows, which :func:`mask_from_kth` resolves by index order.
    """
    # np.positive is an integer identity ufunc: a SIMD copy. np.copyto takes
    # memcpy, which is slower on a cache-sized block.
    np.positive(mag_bits, out=scratch)
    scratch.partition(k, axis=1)
    kth = scratch[:, :k].max(axis=1, keepdims=True)
    tied = np.flatnonzero(scratch[:, k] == kth[:, 0])
    return kth, tied


def mask_from_kth(
    mag_bits: np.ndarray, kth: np.ndarray, tied: np.ndarray, k: int, mask: np.ndarray
) -> np.ndarray:
    np.less_equal(mag_bits, kth, out=mask)
    if tied.size:
        rows = mag_bits[tied]
        below = rows < kth[tied]
        at = rows == kth[tied]
        room = k - np.count_nonzero(below, axis=1)
        mask[tied] = below | (at & (np.cumsum(at, axis=1) <= room[:, None]))
    return mask


def selection_words(mag_bits: np.ndarray, kth: np.ndarray) -> np.ndarray:
    """All-ones words where ``mag_bits <= kth``, all-zeros elsewhere (in place).

    ``mag_bits - kth - 1`` is negative exactly where ``mag_bits <= kth`` (all
    mag_bits are non-negative), so an arithmetic right shift by (bits - 1)
    turns it into the word mask: two SIMD passes over cached data, and a mask
    that selects with bit operations instead of a compare plus a masked copy
    (``putmask`` runs several times slower). ``mag_bits`` is overwritten.
    """
    select = np.subtract(mag_bits, kth + 1, out=mag_bits)
    return np.right_shift(select, mag_bits.dtype.itemsize * 8 - 1, out=select)


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64 finaliser, vectorised (uint64 arithmetic wraps by design)."""
    x = x + _GOLDEN
    x = (x ^ (x >> np.uint64(30))) * _MIX1
    x = (x ^ (x >> np.uint64(27))) * _MIX2
    return x ^ (x >> np.uint64(31))


@lru_cache(maxsize=16)
def _column_hashes(d: int) -> np.ndarray:
    hashes = _splitmix64(np.arange(d, dtype=np.uint64))
    hashes.setflags(write=False)
    return hashes


def _row_seeds(clean: np.ndarray, salt: bytes) -> np.ndarray:
    """One 64-bit seed per row: HMAC-SHA256(salt, row as little-endian float32)."""
    with np.errstate(over="ignore"):  # rows beyond float32's range hash as +-inf
        canonical = np.ascontiguousarray(clean, dtype="<f4")
    # One HMAC per row is inherent to a per-embedding keyed hash (hashlib has no
    # batch API); each call hashes the row in C.
    return np.fromiter(
        (
            int.from_bytes(hmac.digest(salt, row.data, hashlib.sha256)[:8], "little")
            for row in canonical
        ),
        dtype=np.uint64,
        count=len(canonical),
    )


def hashed_mask(clean: np.ndarray, k: int, salt: bytes) -> np.ndarray:
    """Positions drawn from HMAC-SHA256(salt, clean row as little-endian float32).

    The paper's "Random Selection" seeds a PRNG with SHA-256 of the embedding so
    that repeated queries get the same positions; keying the hash with the
    secret salt also makes the positions unpredictable to anyone without the
    key. Hashing the row rounded to float32 (the precision embedding services
    serve) makes the choice independent of whether the caller passed float32
    or float64, at half the hashing cost of float64 bytes. Each row's 64-bit seed then gives every
    coordinate a pseudo-random rank (the top 32 bits of SplitMix64), and the k
    lowest ranks win.
    """
    n, d = clean.shape
    mask = np.empty((n, d), dtype=bool)
    with np.errstate(over="ignore"):
        mixed = _splitmix64(_row_seeds(clean, salt)[:, None] ^ _column_hashes(d)[None, :])
    # The top 32 bits are the rank: a 32-bit partition is several times faster
    # than a 64-bit one, and a rare equal rank goes to the lower index.
    ranks = (mixed >> np.uint64(32)).astype(np.uint32)
    k_lowest_mask(ranks, k, np.empty_like(ranks), mask)
    return mask
