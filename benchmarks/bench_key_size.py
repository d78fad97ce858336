"""How large are the serving key and its audit file with the default keygen? (issue 38)

The serving key (``provider.key``) is what every serving process loads, from a
file, a secret manager or ``$ESPEW_KEY``: issue 38 asks for at most 16 KiB at
d = 384. The audit file (``provider.key.audit``) stays with the verifier.

Makes one key exactly as ``espew keygen --corpus rotten_tomatoes --embedder
minilm --out provider.key`` does (the library defaults, the model's window),
on the whole offline Rotten Tomatoes corpus with the offline MiniLM (its
answers read from the lab's embedding cache, as bench_faithful_copy does, so
keygen takes seconds), writes both files into a temporary folder and prints
their sizes in bytes, with the serving key's largest fields. Run:

    .venv/bin/python benchmarks/bench_key_size.py
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from bench_faithful_copy import TARGET_TEXT, Lookup

from espew_integrations import WatermarkKey
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm
from espew_lab.cache import cached_embed

KIB = 1024
SERVING_LIMIT = 16 * KIB  # issue 38, at d = 384


def field_sizes(serving_json: str) -> list[tuple[str, int]]:
    """The serving key's payload fields by the bytes of their JSON, largest first."""
    payload = json.loads(serving_json)["key"]
    sizes = {name: len(json.dumps(value, separators=(",", ":"))) for name, value in payload.items()}
    return sorted(sizes.items(), key=lambda item: -item[1])


def main() -> None:
    texts = list(rotten_tomatoes().texts)
    model = minilm()
    victim = Lookup(model, texts, cached_embed(model, texts, model_name=model.name))
    key = WatermarkKey.generate(
        texts, victim, target_text=TARGET_TEXT, window=model.max_tokens, marking="words"
    )
    with tempfile.TemporaryDirectory() as folder:
        path = key.save(Path(folder) / "provider.key")
        serving = path.stat().st_size
        audit = Path(f"{path}.audit").stat().st_size
    print(
        f"key {key.key_id}: {len(texts):,} Rotten Tomatoes texts, dim={key.dim}, "
        f"{len(key.triggers)} triggers, {len(key.band)} band words, "
        f"band {key.freq_band}, {key.audit_queries} audit queries"
    )
    verdict = "within" if serving <= SERVING_LIMIT else "OVER"
    print(
        f"serving key: {serving:,} bytes ({serving / KIB:.1f} KiB, {verdict} the "
        f"{SERVING_LIMIT // KIB} KiB of issue 38)"
    )
    print(f"audit file:  {audit:,} bytes ({audit / KIB / KIB:.2f} MiB)")
    print("serving key's largest fields (JSON bytes):")
    for name, size in field_sizes(key.serving_json())[:6]:
        print(f"  {name}: {size:,}")


if __name__ == "__main__":
    main()
