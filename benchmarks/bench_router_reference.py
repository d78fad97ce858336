"""How much ordinary traffic a routing thief needs to spot the audit, with and without cover.

The thief of ``espew_lab.router`` answers what looks like an audit
from the clean model and everything else from its stolen copy (here the
watermarked service itself, the most faithful copy). It knows the library's band
rule, so it watches the band the key was drawn from, and it takes the first N
corpus texts as its sample of ordinary traffic. For each audit design and each N
this prints the share of the audit it routed and the verdict on it::

    .venv/bin/python benchmarks/bench_router_reference.py \
        > docs/results/faithful/router-reference.txt

Designs: the earlier default key (20 triggers over 0.5-1%, 8 probes a word, no
cover), the default key without its cover texts, and the default key. One key
seed (3), the offline MiniLM, Rotten Tomatoes; about 10 minutes on 2 cores.

``--lone-z 4`` arms the router's single-band-word rule as well (every probe holds
exactly one band word, where 40% of ordinary texts with one hold more), and
``--designs default`` keeps only the default key::

    .venv/bin/python benchmarks/bench_router_reference.py --lone-z 4 --designs default \
        > docs/results/faithful/router-lone.txt
"""

from __future__ import annotations

import argparse
import copy
import time

from espew_integrations import WatermarkKey, verify, watermark
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm
from espew_lab.router import AuditHistory, AuditRouter

TARGET_TEXT = "Acme Embeddings, licensed vectors"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--references", type=int, nargs="+", default=[2000, 6000, 12752])
    parser.add_argument("--lone-z", type=float, default=None, help="arm the lone-word rule")
    parser.add_argument("--designs", choices=["all", "default"], default="all")
    parser.add_argument("--probe-mix", choices=["single", "corpus"], default="single")
    args = parser.parse_args()
    model, corpus = minilm(), rotten_tomatoes()
    texts = list(corpus.texts)
    common = dict(target_text=TARGET_TEXT, seed=args.seed, window=model.max_tokens)
    earlier = WatermarkKey.generate(
        texts, model, n_triggers=20, freq_band=(0.005, 0.01), probes_per_word=8,
        cover_traffic=False, **common,
        marking="words",  # the paper's design, as measured
    )  # fmt: skip
    default = WatermarkKey.generate(
        texts, model, probe_mix=args.probe_mix, **common, marking="words"
    )
    designs = {
        "earlier default (20 triggers, 0.5-1%, no cover)": earlier,
        "default without its cover texts": default.replace(cover_texts=()),
        "default (probes and cover texts)": default,
    }
    if args.designs == "default":
        designs = {"default (probes and cover texts)": default}
    rules = "the default ones" + ("" if args.lone_z is None else f" + lone_z={args.lone_z:g}")
    print(f"default key's probe_mix: {args.probe_mix}")
    print(f"router rules: {rules}; 'ordinary routed': of 2,000 corpus texts after the reference")
    print("(its last 2,000 when it is the whole corpus), sent in batches of 64 like an audit")
    print(f"{'audit':48s} {'queries':>7s} {'reference':>9s} {'routed':>7s}  verdict")
    for name, key in designs.items():

        def service(batch, key=key):
            return watermark(batch, model(batch), key)

        for n in args.references:
            history = AuditHistory.from_texts(
                texts[:n], rare_band=key.freq_band, lone_z=args.lone_z
            )
            started = time.perf_counter()
            thief = AuditRouter(service, model, history=copy.deepcopy(history))
            report = verify(thief, key, seed=0)
            ordinary = AuditRouter(service, model, history=copy.deepcopy(history))
            customers = texts[n : n + 2000] if n + 2000 <= len(texts) else texts[-2000:]
            for start in range(0, len(customers), 64):
                ordinary(customers[start : start + 64])
            print(
                f"{name:48s} {key.audit_queries:7d} {n:9d} "
                f"{thief.n_routed / thief.n_queries:7.1%}  {report.status}, "
                f"ordinary routed {ordinary.routed_fraction:.1%}, "
                f"p = {report.p_value:.1e} ({time.perf_counter() - started:.0f} s)",
                flush=True,
            )


if __name__ == "__main__":
    main()
