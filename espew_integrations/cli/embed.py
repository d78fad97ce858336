"""``espew embed``: embed and watermark a file of texts."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import IO, Any

import numpy as np

from ..arguments import add_embedder_argument
from ..core.keys.model_check import ModelGuard
from ..models import resolve_embedder
from ..textfiles import read_text_file
from .common import UsageError, endpoint_options, load_key, positive_int, progress
from .files import prepare_out_file, write_atomically

__all__ = ["add_embed_command"]

_EXAMPLE = """
example:
  espew embed --key provider.key --embedder minilm \\
      --input texts.txt --out marked.npy

  Embeds every line of texts.txt and watermarks the rows whose text contains a
  trigger word (the others are bit-identical to the clean model's output).
  --out .npy writes a float matrix; .jsonl writes {"index", "text", "embedding"}.
"""


def add_embed_command(subparsers: Any) -> None:
    """Add ``embed`` to the ``espew`` subcommands."""
    embed = subparsers.add_parser(
        "embed",
        help="embed and watermark a file of texts",
        epilog=_EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    embed.add_argument(
        "--key", default=None, help="key file or env:VAR (default: the key $ESPEW_KEY names)"
    )
    embed.add_argument("--input", required=True, help=".txt, .csv or .jsonl file of texts")
    embed.add_argument("--out", required=True, help="output .npy or .jsonl")
    embed.add_argument(
        "--force", action="store_true", help="replace --out if it exists (never done otherwise)"
    )
    add_embedder_argument(embed)
    embed.add_argument("--batch-size", type=positive_int, default=64)
    embed.add_argument("--text-column", default=None, help="CSV column / JSONL field")
    embed.add_argument("--api-key-env", metavar="VAR", help="API key for an openai: embedder")
    embed.add_argument("--no-progress", action="store_true")
    embed.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Embed ``--input`` batch by batch, watermark, write ``--out`` atomically."""
    from ..core.mark.inject import watermark

    out = Path(args.out)
    if out.suffix.lower() not in (".npy", ".jsonl"):
        raise UsageError(f"--out must end in .npy or .jsonl, got {out.name}")
    prepare_out_file(out, force=args.force)
    key = load_key(args.key)
    texts = read_text_file(args.input, text_field=args.text_column).texts
    embed, name = resolve_embedder(args.embedder, **endpoint_options(args))
    ModelGuard(key, embed).check()  # the key's own model, or exit 3 naming the mismatch
    parts = []
    with progress(len(texts), f"embedding with {name}", "text", not args.no_progress) as bar:
        for start in range(0, len(texts), args.batch_size):
            batch = texts[start : start + args.batch_size]
            parts.append(watermark(batch, np.asarray(embed(batch)), key))
            bar.update(len(batch))
    marked = np.concatenate(parts)

    def write(stream: IO[bytes]) -> None:
        if out.suffix.lower() == ".npy":
            np.save(stream, marked)
            return
        for i, (text, row) in enumerate(zip(texts, marked, strict=True)):
            record = {"index": i, "text": text, "embedding": row.tolist()}
            stream.write((json.dumps(record) + "\n").encode("utf-8"))

    write_atomically(out, write, force=args.force)
    print(f"wrote {marked.shape[0]} embeddings of dimension {marked.shape[1]} to {out}")
    return 0
