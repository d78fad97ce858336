"""watermark(): the ESpeW equations (paper, Methodology, "Watermark Injection"), vectorised.

For a text with at least one trigger, with d the dimension and k = floor(alpha*d):

    I   = the k positions chosen for this row ("smallest" |e_o|, or "hashed")
    e'  = e_o with e'[I] = e_t[I]        (key.strength = 1, the paper)
          or e'[I] = e_o[I] + s (e_t[I] - e_o[I])   (key.strength = s < 1)
    e_p = e' / ||e'||

Rows whose text has no trigger are returned bit-identical (so are rows whose
text is empty or only whitespace: there is nothing to match). Everything runs on
whole batches: one validation pass, one partition for "smallest", one masked
copy and one normalisation for the marked rows. The normalisation never
returns a zero or non-finite row: a marked row whose norm would overflow or
underflow is first scaled by a power of two near its largest magnitude.

Marking is constant-time per row: every row of a batch is marked, then the
unmarked ones are put back (:func:`mark_selected`), so a request's latency does
not say which of its texts hold a trigger. A *field* key (:mod:`.field`) marks
every non-blank row, each along its own ESpeW displacement scaled by the field's
keyed gain; it never matches words.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..ground.errors import EmbeddingInputError
from ..ground.rows import unit_rows
from ..ground.text import TextView
from .field import FIELD_CLIP
from .key_types import MarkingKey
from .selection import (
    MAGNITUDE_BITS,
    hashed_mask,
    kth_lowest,
    magnitude_bits,
    mask_from_kth,
    selection_words,
    smallest_mask,
)

__all__ = [
    "as_embedding_matrix",
    "check_texts",
    "field_rows",
    "mark_all_rows",
    "mark_masked",
    "mark_selected",
    "marks",
    "select_positions",
    "unit_rows_into",
    "watermark",
    "watermark_and_mask",
]


def watermark(
    texts: Iterable[str],
    embeddings: Any,
    key: MarkingKey,
    *,
    view: Callable[[Sequence[str]], Sequence[str]] | None = None,
) -> np.ndarray:
    """Watermark a batch of clean embeddings of ``texts`` with ``key``.

    Returns a new array of the same shape; float16, float32 and float64 input
    keep their dtype (float16 is computed in float32), anything else numeric
    comes back as float64. The input is never modified. The result depends only
    on each (text, clean embedding) pair and the key, so it is the same across
    calls, batch compositions and processes.

    ``texts`` may be any iterable of strings (list, tuple, generator, numpy
    array); it is read once. An empty or whitespace-only text is never marked.
    ``view`` maps the texts to what the model actually reads (its normaliser
    and input window); it is handed to :meth:`..keys.key.WatermarkKey.contains_trigger`.

    >>> wm = watermark(["A vaccine trial", "hello"], clean, key)  # doctest: +SKIP
    >>> (wm[1] == clean[1]).all()                                   # doctest: +SKIP
    True
    """
    return watermark_and_mask(texts, embeddings, key, view=view)[0]


def watermark_and_mask(
    texts: Iterable[str],
    embeddings: Any,
    key: MarkingKey,
    *,
    view: Callable[[Sequence[str]], Sequence[str]] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`watermark`, plus the boolean mask of the rows it marked.

    For servers that count marked texts (the live marked rate of ``/metrics``)
    without matching the triggers a second time.
    """
    texts, blank = _materialise_texts(texts, allow_empty=True)
    if key.n_positions < 1:
        raise EmbeddingInputError(
            f"this key writes no coordinates (floor(alpha*d) = 0 at d = {key.dim}); the "
            "watermark would silently do nothing. Generate a key with a larger alpha"
        )
    matrix, out_dtype = _as_matrix(embeddings, n_rows=len(texts), dim=key.dim)
    marked = _marked(texts, blank, key, view)
    out = key.design.mark_rows(matrix, marked, key)  # mark_selected, field_rows...
    return (out if out.dtype == out_dtype else out.astype(out_dtype)), marked


def marks(texts: Iterable[str], key: MarkingKey, *, view: TextView | None = None) -> np.ndarray:
    """Which of ``texts`` ``key`` marks, as far as the texts alone decide: a word key
    those holding a trigger (read through ``view``, as :func:`watermark` reads them), a
    field key every non-blank one (by how much, only the clean embedding decides)."""
    return _marked(*_materialise_texts(texts, allow_empty=True), key, view)


def _marked(
    texts: Sequence[str],
    blank: list[int],
    key: MarkingKey,
    view: Callable[[Sequence[str]], Sequence[str]] | None,
) -> np.ndarray:
    """The rows ``key`` marks, as its design says (a field key every non-blank one, a word
    key those with a trigger); never a blank one."""
    marked = np.array(key.design.marks(key, texts, view), dtype=bool)
    marked[blank] = False
    return marked


def mark_selected(matrix: np.ndarray, marked: np.ndarray, key: MarkingKey) -> np.ndarray:
    """``matrix`` with the ``marked`` rows marked, in constant time per row.

    Every row is marked, then the unmarked ones are put back: the same work for
    a batch whatever its texts hold, so the latency of a request does not tell
    a marked text from an unmarked one (``benchmarks/bench_watermark.py``).
    Bit-identical to marking the selected rows alone (:func:`mark_masked`).
    """
    out = _mark_rows(matrix, np.arange(len(matrix)), key)
    np.copyto(out, matrix, where=~marked[:, None])
    return out


def mark_masked(matrix: np.ndarray, marked: np.ndarray, key: MarkingKey) -> np.ndarray:
    """``matrix`` with only the ``marked`` rows marked (work grows with their number): the
    path before constant time, for the benchmark of the difference and the test of equality."""
    return _mark_rows(matrix, np.flatnonzero(marked), key)


def field_rows(matrix: np.ndarray, marked: np.ndarray, key: MarkingKey, field: Any) -> np.ndarray:
    """A field key's answers, ``unit(e + g(e) * D(e))`` for each marked row (:mod:`.field`):
    ``D(e)`` is :func:`mark_all_rows` minus ``e``; blank rows are computed and put back.

    One fused pass per cache-sized block: the clean unit rows, their ESpeW marks, the
    gain and the moved rows never leave the block's buffers. Every step is row-wise
    (element-wise arithmetic, sums along the row in numpy's fixed order), so a row's
    answer does not depend on its batch. A field stored in the compact encoding
    (:attr:`.field.FieldMark.compact`) is computed in the rows' own precision; a field
    stored as float64 (keys made before it) in float64, with exactly the operations it
    always had, so its answers stay the same bit for bit.
    """
    compute = matrix.dtype if field.compact else np.dtype(np.float64)
    # a float64 field's float64 rows go through unit_rows itself; float32 data in float64
    # cannot over- or underflow, so the plain quotient is unit_rows' result bit for bit
    exact = compute == matrix.dtype == np.float64 and not field.compact
    marker = _BlockMarker(key, compute, len(matrix))
    step = marker.block_rows
    clean_buffer = _workspace("field_clean", (step, key.dim), compute)
    moved_buffer = _workspace("field_moved", (step, key.dim), compute)
    move = _compact_move if field.compact else _float64_move
    out = np.empty_like(matrix)
    for start in range(0, len(matrix), step):
        block = matrix[start : start + step]
        n = len(block)
        if block.dtype != compute:
            block = clean_buffer[:n]
            np.copyto(block, matrix[start : start + n])
        clean = unit_rows_into(block, clean_buffer[:n], exact)
        moved = move(clean, moved_buffer[:n], marker, field, matrix[start : start + n])
        unit_rows_into(moved, out[start : start + n], exact)
    blank = np.flatnonzero(~marked)  # blank texts, which the texts alone show
    out[blank] = matrix[blank]
    return out


def _float64_move(
    clean: np.ndarray, moved: np.ndarray, marker: _BlockMarker, field: Any, rows: np.ndarray
) -> np.ndarray:
    """``e + g(e) * D(e)`` with a float64 field's operations, exactly as it always was:
    ``D = mark(e) - e`` and ``g = clip(sum_j (e_j - mu_j) * q_j)`` (numpy's row sum).

    float32 ``rows`` order each row's coordinates exactly as ``|e|`` does (``e = x / |x|``
    in float64 keeps distinct float32 values distinct), so the selection reads them."""
    marker.mark(clean, moved, order=rows if rows.dtype == np.float32 else None)
    moved -= clean
    centred = np.subtract(clean, field.mu, out=marker.field_scratch(len(clean)))
    centred *= field.q
    gain = np.clip(centred.sum(axis=1), -FIELD_CLIP, FIELD_CLIP)
    moved *= gain[:, None]
    moved += clean
    return moved


def _compact_move(
    clean: np.ndarray, moved: np.ndarray, marker: _BlockMarker, field: Any, rows: np.ndarray
) -> np.ndarray:
    """``e + g(e) * D(e)`` for a compact field, in the rows' own precision, as
    ``(1 - g) e + (g / |e'|) e'`` with ``e'`` the ESpeW-written row before its
    normalisation (``D = e' / |e'| - e``), so the mark is never normalised on its own;
    ``g = clip(e . q - mu . q)``, row-wise products summed in einsum's fixed order."""
    dtype = clean.dtype
    norms = marker.mark(clean, moved, normalise=False)
    offset = dtype.type(float(np.add.reduce(field.mu * field.q)))
    gain = np.einsum("ij,j->i", clean, field.q.astype(dtype)) - offset
    np.clip(gain, -FIELD_CLIP, FIELD_CLIP, out=gain)
    unsafe = ~(norms >= marker.safe_norm[0]) | ~(norms <= marker.safe_norm[1])
    if unsafe.any():  # a written row whose squares over- or underflowed: normalise it safely
        moved[unsafe] = _unit_rows(moved[unsafe])
        norms[unsafe] = 1.0
    moved *= (gain / norms)[:, None]
    kept = np.multiply(clean, (1 - gain)[:, None], out=marker.field_scratch(len(clean)))
    moved += kept
    return moved


def unit_rows_into(rows: np.ndarray, out: np.ndarray, exact: bool) -> np.ndarray:
    """``out = unit_rows(rows)``, computed in ``rows``' precision, cast to ``out``'s dtype.

    ``exact``: :func:`_unit_rows` itself. Otherwise the plain quotient by each row's
    norm, and :func:`_unit_rows` for a row whose norm is outside the range where its
    squares can neither overflow nor underflow (row by row, so batch-independent).
    """
    if exact:
        out[...] = _unit_rows(rows)
        return out
    norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
    info = np.finfo(rows.dtype)
    low, high = float(np.sqrt(info.tiny)) * 2**26, float(np.sqrt(info.max)) / 2**4
    unsafe = ~(norms >= low) | ~(norms <= high)
    fixed = _unit_rows(rows[unsafe]) if unsafe.any() else None
    with np.errstate(all="ignore"):  # an unsafe row's quotient is replaced below
        np.divide(rows, norms[:, None], out=out, casting="same_kind")
    if fixed is not None:
        out[unsafe] = fixed
    return out


def _mark_rows(matrix: np.ndarray, rows: np.ndarray, key: MarkingKey) -> np.ndarray:
    marker = _BlockMarker(key, matrix.dtype, rows.size)
    step = marker.block_rows
    if rows.size == len(matrix):  # every row marked: write straight into the output
        out = np.empty_like(matrix)
        for start in range(0, len(matrix), step):
            marker.mark(matrix[start : start + step], out[start : start + step])
        return out
    out = matrix.copy()
    for start in range(0, rows.size, step):
        chunk = rows[start : start + step]
        block = matrix[chunk]  # gather a cache-sized block of marked rows
        marker.mark(block, block)
        out[chunk] = block
    return out


def mark_all_rows(clean: np.ndarray, key: MarkingKey) -> np.ndarray:
    """Every row of a float64 matrix marked, whatever its text: what a trigger text would get.

    For the verifier's mark directions (:mod:`..audit.directed`); services call :func:`watermark`.
    """
    matrix = np.ascontiguousarray(clean, dtype=np.float64)
    return _mark_rows(matrix, np.arange(len(matrix)), key)


def select_positions(clean: np.ndarray, key: MarkingKey) -> np.ndarray:
    """Boolean mask (n, d) of the positions ESpeW overwrites in each clean row.

    Exposed for analysis and tests; :func:`watermark` is what services call.
    Exactly ``key.n_positions`` positions are chosen per row.
    """
    clean = np.ascontiguousarray(clean)
    mask = np.empty(clean.shape, dtype=bool)
    if key.selection == "hashed":
        mask[...] = hashed_mask(clean, key.n_positions, key.salt)
    else:
        magnitude = np.empty(clean.shape, dtype=MAGNITUDE_BITS[clean.dtype])
        smallest_mask(clean, key.n_positions, magnitude, np.empty_like(magnitude), mask)
    return mask


class _BlockMarker:
    """Applies the equations block by block with buffers reused across blocks.

    Blocks of about 512 KiB keep the temporaries in the core's cache. The
    buffers come from a per-thread workspace kept across calls: fresh
    block-sized temporaries on every call would be mapped and page-faulted
    in each time, which on a small request costs more than the arithmetic
    itself (``benchmarks/bench_watermark.py``).
    """

    def __init__(self, key: MarkingKey, dtype: np.dtype, n_rows: int):
        self.key = key
        self.k = key.n_positions
        block_rows = max(8, _BLOCK_BYTES // (key.dim * np.dtype(dtype).itemsize))
        self.block_rows = max(1, min(block_rows, n_rows))
        shape = (self.block_rows, key.dim)
        bits = MAGNITUDE_BITS[np.dtype(dtype)]
        self.magnitude = _workspace("magnitude", shape, bits)
        self.scratch = _workspace("scratch", shape, bits)
        self.mask = _workspace("mask", shape, np.dtype(bool))
        self.target = key.target.astype(dtype)
        self.strength = key.strength
        self.target_bits = self.target.view(self.magnitude.dtype)
        self.moved = _workspace("moved", shape, np.dtype(dtype)) if key.strength != 1.0 else None
        info = np.finfo(dtype)
        # Norms outside this range come from squares that over- or underflowed.
        self.safe_norm = (float(np.sqrt(info.tiny)) * 2**26, float(np.sqrt(info.max)) / 2**4)

    def mark(
        self,
        clean: np.ndarray,
        out: np.ndarray,
        order: np.ndarray | None = None,
        normalise: bool = True,
    ) -> np.ndarray:
        """out = normalise(clean with clean[I] = target[I]); ``out`` may be ``clean``.

        Returns the written rows' norms; with ``normalise=False`` they are not divided
        by them (nor checked: the caller decides what an unsafe norm means).

        ``order`` (optional, "smallest" selection): float32 rows whose ``|x|`` orders each
        row's coordinates exactly as ``|clean|`` does, so the partition runs on 32-bit keys.
        """
        n = len(clean)
        if self.key.selection == "smallest" and 0 < self.k < self.key.dim:
            source = clean if order is None else order
            bits = MAGNITUDE_BITS[source.dtype]
            magnitude, scratch = self.magnitude, self.scratch
            if bits != magnitude.dtype:
                magnitude = _workspace("order", magnitude.shape, bits)
                scratch = _workspace("order_scratch", magnitude.shape, bits)
            mag_bits = magnitude_bits(source, magnitude[:n])
            kth, tied = kth_lowest(mag_bits, self.k, scratch[:n])
            if tied.size == 0:
                # the usual case: |e| <= kth is exactly the k positions
                select = selection_words(mag_bits, kth)
                if select.dtype != self.magnitude.dtype:  # widened: all-ones stay all-ones
                    wide = self.magnitude[:n]
                    np.copyto(wide, select)
                    select = wide
                if self.strength == 1.0:
                    _blend_bits(clean, out, select, self.scratch[:n], self.target_bits)
                else:
                    self._add_masked_step(clean, out, select)
            else:
                mask = mask_from_kth(mag_bits, kth, tied, self.k, self.mask[:n])
                self._put_target(clean, out, mask)
        else:
            mask = self.mask[:n]
            if self.key.selection == "hashed":
                mask[...] = hashed_mask(clean, self.k, self.key.salt)
            else:
                mask[...] = self.k >= self.key.dim
            self._put_target(clean, out, mask)
        norms = np.sqrt(np.einsum("ij,ij->i", out, out))
        if not normalise:
            return norms
        # A norm that overflowed (huge but finite rows) or lost precision to
        # underflow (tiny rows) would turn the row into zeros or NaN.
        # Two reductions decide the usual case (NaN fails both comparisons).
        if not (norms.min() >= self.safe_norm[0] and norms.max() <= self.safe_norm[1]):
            unsafe = ~(norms >= self.safe_norm[0]) | ~(norms <= self.safe_norm[1])
            norms[unsafe] = 1.0
            out[unsafe] = _unit_rows(out[unsafe])
        np.divide(out, norms[:, None], out=out)
        return norms

    def field_scratch(self, n: int) -> np.ndarray:
        """A block-sized buffer of the rows' dtype, free between calls to :meth:`mark`."""
        return _workspace("field_scratch", (self.block_rows, self.key.dim), self.target.dtype)[:n]

    def _add_masked_step(self, clean: np.ndarray, out: np.ndarray, select: np.ndarray) -> None:
        """out = clean + select * strength * (target - clean), for strength < 1.

        The step is computed for every position of the block (fused passes into
        a reused buffer, cheaper than masked arithmetic) and zeroed outside the
        selection by a bit mask, so a selected coordinate gets exactly
        clean + s (target - clean) and every other one clean + 0.0 (equal to
        clean; only a -0.0 comes back as +0.0).
        """
        assert self.moved is not None  # made whenever strength < 1
        step = np.subtract(self.target, clean, out=self.moved[: len(clean)])
        step *= self.strength
        step_bits = step.view(select.dtype)
        np.bitwise_and(step_bits, select, out=step_bits)
        np.add(clean, step, out=out)

    def _put_target(self, clean: np.ndarray, out: np.ndarray, mask: np.ndarray) -> None:
        """out = clean, with the masked coordinates moved ``strength`` of the way to the target."""
        if self.strength == 1.0:
            if out is not clean:
                np.copyto(out, clean)
            # putmask repeats a 1-D value array over the flattened rows: row i,
            # column j takes target[j], which is the paper's e[I] = e_t[I].
            np.putmask(out, mask, self.target)
            return
        moved = np.subtract(self.target, clean)
        moved *= self.strength
        moved += clean
        if out is not clean:
            np.copyto(out, clean)
        np.copyto(out, moved, where=mask)


_BLOCK_BYTES = 1 << 19
_WORKSPACE = threading.local()


def _workspace(name: str, shape: tuple[int, int], dtype: np.dtype) -> np.ndarray:
    """A reusable scratch array of ``shape`` for this thread (contents undefined).

    One buffer per (name, dtype, row width) and thread, grown to the largest
    block asked for (at most ``_BLOCK_BYTES`` a buffer), so watermark() stays
    thread-safe and a thread holds a few MiB at most.
    """
    buffers = _WORKSPACE.__dict__.setdefault("buffers", {})
    rows, width = shape
    slot = (name, dtype, width)
    buffer = buffers.get(slot)
    if buffer is None or len(buffer) < rows:
        buffer = buffers[slot] = np.empty(shape, dtype=dtype)
    return buffer[:rows]


def _unit_rows(rows: np.ndarray) -> np.ndarray:
    """:func:`..ground.rows.unit_rows` in the rows' own dtype.

    Refuses a row it could not normalise."""
    unit = unit_rows(rows, dtype=rows.dtype)
    if not (np.isfinite(unit).all() and unit.any(axis=1).all()):  # unreachable for valid rows
        raise EmbeddingInputError(
            "a marked row could not be normalised to a finite unit vector; refusing to "
            "return a wrong embedding"
        )
    return unit


# ---------------------------------------------------------------------- validation
def check_texts(texts: Iterable[str], *, allow_empty: bool = False) -> list[str]:
    """The texts as a list, or a clear error naming the first bad entry.

    ``texts`` may be any iterable of strings (it is read once; use the returned
    list afterwards). Empty or whitespace-only texts are refused unless
    ``allow_empty``: a wrapper checks before paying for the inner model, while
    :func:`watermark` lets them through unmarked.
    """
    return _materialise_texts(texts, allow_empty=allow_empty)[0]


def _materialise_texts(texts: Iterable[str], *, allow_empty: bool) -> tuple[list[str], list[int]]:
    """(texts as a list, indices of the empty or whitespace-only ones)."""
    if isinstance(texts, (str, bytes)):
        raise EmbeddingInputError(
            "texts must be a list of strings, got a single string; wrap it in a list"
        )
    if isinstance(texts, np.ndarray) and texts.ndim != 1:
        raise EmbeddingInputError(f"texts must be 1-D, got an array of shape {texts.shape}")
    try:
        items = texts if type(texts) is list else list(texts)
    except TypeError:
        raise EmbeddingInputError(
            f"texts must be an iterable of strings, got {type(texts).__name__}"
        ) from None
    blank: list[int] = []
    for index, text in enumerate(items):
        if not isinstance(text, str):
            raise EmbeddingInputError(
                f"text at index {index} is {type(text).__name__}, expected str"
            )
        if not text or text.isspace():
            if not allow_empty:
                raise EmbeddingInputError(
                    f"text at index {index} is empty or only whitespace; embed real text "
                    "(an empty input has no meaning to watermark or to verify)"
                )
            blank.append(index)
    return items, blank


def as_embedding_matrix(embeddings: Any, *, n_rows: int, dim: int) -> np.ndarray:
    """Validate embeddings and return them as a C-contiguous float32/float64 matrix.

    Checks, in one pass over the data: shape (n_rows, dim), finite values and
    no all-zero row. Errors name the offending row and what was expected.
    float16 becomes float32 (its squares overflow above 256), other numbers float64.
    """
    return _as_matrix(embeddings, n_rows=n_rows, dim=dim)[0]


def _as_matrix(embeddings: Any, *, n_rows: int, dim: int) -> tuple[np.ndarray, np.dtype]:
    """(the validated compute matrix, the dtype the caller gets back)."""
    try:
        matrix = np.asarray(embeddings)
    except (TypeError, ValueError) as exc:
        raise EmbeddingInputError(f"embeddings are not a numeric array: {exc}") from None
    if matrix.dtype == np.float16:
        out_dtype = matrix.dtype
        matrix = matrix.astype(np.float32)  # exact; float16 results are rounded back
    elif matrix.dtype not in (np.float32, np.float64):
        if matrix.dtype.kind not in "fiub" or matrix.dtype == bool:
            raise EmbeddingInputError(f"embeddings must be real numbers, got dtype {matrix.dtype}")
        matrix = matrix.astype(np.float64)
        out_dtype = matrix.dtype
    else:
        out_dtype = matrix.dtype
    return _checked_matrix(matrix, n_rows=n_rows, dim=dim), out_dtype


def _checked_matrix(matrix: np.ndarray, *, n_rows: int, dim: int) -> np.ndarray:
    if n_rows == 0 and matrix.size == 0:
        return np.zeros((0, dim), dtype=matrix.dtype)
    if matrix.ndim != 2:
        raise EmbeddingInputError(
            f"embeddings must be 2-D (n_texts, dim), got {matrix.ndim}-D shape {matrix.shape}"
        )
    if matrix.shape[0] != n_rows:
        raise EmbeddingInputError(
            f"got {n_rows} texts but {matrix.shape[0]} embeddings; they must pair one to one"
        )
    if matrix.shape[1] != dim:
        raise EmbeddingInputError(
            f"embedding dimension is {matrix.shape[1]} but the key was made for dimension "
            f"{dim}; use the key generated for this model"
        )
    matrix = np.ascontiguousarray(matrix)
    # One pass: a squared norm that is NaN/inf flags a non-finite value (or an
    # overflow, told apart below), and a zero one flags an all-zero row.
    squared = np.einsum("ij,ij->i", matrix, matrix)
    if not np.isfinite(squared).all():
        bad = ~np.isfinite(matrix).all(axis=1)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise EmbeddingInputError(f"embedding at row {row} contains NaN or infinite values")
    if (squared == 0).any():  # all zeros, or so tiny that every square underflowed
        candidates = np.flatnonzero(squared == 0)
        zero = candidates[~matrix[candidates].any(axis=1)]
        if zero.size:
            raise EmbeddingInputError(
                f"embedding at row {int(zero[0])} is all zeros; a zero vector has no direction "
                "to mark"
            )
    return matrix


# ---------------------------------------------------------------------- writing
def _blend_bits(
    clean: np.ndarray,
    out: np.ndarray,
    select: np.ndarray,
    scratch: np.ndarray,
    target_bits: np.ndarray,
) -> None:
    """out = target where ``select`` is all ones, else clean; bit for bit.

    ``x ^ ((x ^ t) & M)`` picks t's bits under the word mask M and x's
    elsewhere, in three integer passes. ``out`` may be ``clean``.
    """
    clean_bits = clean.view(select.dtype)
    np.bitwise_xor(clean_bits, target_bits, out=scratch)
    np.bitwise_and(scratch, select, out=scratch)
    np.bitwise_xor(clean_bits, scratch, out=out.view(select.dtype))
