"""A neural text encoder trained end to end with MSE (needs the ``torch`` extra of espew-lab).

The published stealer fine-tunes BERT with a Linear-ReLU-Linear head against
the service's embeddings. This is the same recipe at CPU scale: WordPiece
tokens (BERT's uncased vocabulary) -> a token embedding table learned from
scratch -> mean pooling -> Linear-ReLU-Linear -> L2 normalisation, trained
with MSE on the service's answers. Its base is not the victim's network: only
the tokenizer's vocabulary is shared, every weight starts random and is learned
from the stolen answers alone.

torch is imported when the stealer is built, never at package import:
``pip install './lab[torch]'`` (for a CPU-only wheel,
``pip install torch==2.13.0`` from a local wheel cache).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._optional import require

__all__ = ["TorchEncoderStealer"]


def _tokenizer():
    from tokenizers import Tokenizer

    from espew_integrations.models import check_available
    from espew_integrations.offline.embedders import minilm_files

    check_available("minilm")  # a missing package fails here, with its pip install line
    # BERT's uncased WordPiece vocabulary, shipped with the offline MiniLM
    tokenizer = Tokenizer.from_file(str(minilm_files()[1]))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


class TorchEncoderStealer:
    """Token embeddings + mean pooling + Linear-ReLU-Linear, trained end to end with MSE.

    >>> copy = TorchEncoderStealer(seed=0).fit(texts, answers)  # doctest: +SKIP
    >>> copy(["a new text"]).shape                               # doctest: +SKIP
    (1, 384)
    """

    name = "torch_encoder"

    def __init__(
        self,
        *,
        width: int = 256,
        epochs: int = 5,
        batch_size: int = 64,
        learning_rate: float = 2e-3,
        max_tokens: int = 64,
        seed: int = 0,
    ):
        require(
            "torch",
            "torch",
            "the torch_encoder thief (a CPU build is enough: pip install torch "
            "--index-url https://download.pytorch.org/whl/cpu)",
        )
        self.width = width
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.max_tokens = max_tokens
        self.seed = seed
        self._tokenizer = _tokenizer()
        self._model = None

    def _ids(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids[: self.max_tokens] for e in self._tokenizer.encode_batch(list(texts))]

    @staticmethod
    def _bag(ids: list[list[int]], rows: np.ndarray):
        import torch

        chosen = [ids[i] for i in rows]
        lengths = [len(x) for x in chosen]
        flat = torch.tensor([t for x in chosen for t in x], dtype=torch.long)
        offsets = torch.tensor(np.concatenate([[0], np.cumsum(lengths)[:-1]]), dtype=torch.long)
        return flat, offsets

    def fit(self, texts: Sequence[str], embeddings: np.ndarray) -> TorchEncoderStealer:
        """Train on ``texts`` against ``embeddings`` (the service's answers)."""
        import torch
        from torch import nn

        targets = np.asarray(embeddings, dtype=np.float32)
        if targets.ndim != 2 or targets.shape[0] != len(texts):
            raise ValueError(
                f"need one embedding per text, got {targets.shape} for {len(texts)} texts"
            )
        torch.manual_seed(self.seed)
        dim = targets.shape[1]
        model = nn.ModuleDict(
            {
                "tokens": nn.EmbeddingBag(
                    self._tokenizer.get_vocab_size(), self.width, mode="mean"
                ),
                "head": nn.Sequential(nn.Linear(self.width, dim), nn.ReLU(), nn.Linear(dim, dim)),
            }
        )
        optimiser = torch.optim.AdamW(model.parameters(), lr=self.learning_rate)
        ids = self._ids(texts)
        y = torch.from_numpy(targets)
        rng = np.random.default_rng(self.seed)
        model.train()
        for _ in range(self.epochs):
            order = rng.permutation(len(ids))
            for start in range(0, len(order), self.batch_size):
                rows = order[start : start + self.batch_size]
                flat, offsets = self._bag(ids, rows)
                out = model["head"](model["tokens"](flat, offsets))
                out = nn.functional.normalize(out, dim=1)
                loss = nn.functional.mse_loss(out, y[rows])
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
        model.eval()
        self._model = model
        return self

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        import torch
        from torch import nn

        if self._model is None:
            raise RuntimeError("this stealer is not trained yet; call fit(texts, embeddings)")
        ids = self._ids(texts)
        with torch.no_grad():
            flat, offsets = self._bag(ids, np.arange(len(ids)))
            out = self._model["head"](self._model["tokens"](flat, offsets))
            return nn.functional.normalize(out, dim=1).numpy().astype(np.float64)

    embed = __call__
