"""Does a thief that logged an earlier audit recognise the next one? (audit rounds)

Every audit of a key asks the texts stored in it. A provider that audits the
same endpoint again (monitoring a competitor every month, say) sends the same
4,232 texts again, and a thief that keeps a log of what each client sent can
notice: no ordinary client repeats another's traffic text for text. Such a
*replay router* answers a client from an honest model when its texts overlap a
logged client's far more than two ordinary clients' do, and the audit then
measures an innocent.

``WatermarkKey.with_audit(corpus, model, audit_round=k)`` draws round ``k`` of
the audit with a salt of its own: another uniform sample of the corpus,
independent of every other round's. This benchmark measures, per key seed:

- the replay statistic: the largest share of a client's texts that one logged
  client also sent. The thief's log holds the earlier rounds' audits and
  ``--logged`` ordinary clients (uniform samples of the corpus, each as large as
  the audit); the ordinary clients it is compared with are ``--clients`` more.
  The router flags a client beyond the 0.1% upper tail of the ordinary ones.
- which audit it flags: round 1 asked again (today's repeat), round 2 after
  round 1, round 3 after rounds 1 and 2;
- the default ``verify`` on each round's key: the watermarked service itself
  (a perfect copy) and the innocent twin (the same model, never watermarked).
  A round-``k`` p-value is ``k`` times the round's own.

Offline MiniLM + Rotten Tomatoes. Run (about a minute per key once the corpus
embeddings are cached):

    .venv/bin/python benchmarks/bench_audit_replay.py > docs/results/faithful/audit-replay.txt
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_audit_window import audit_rows
from bench_faithful_copy import TARGET_TEXT, corpus_lookups

from espew_integrations import WatermarkKey, verify, watermark

TAIL = 1e-3
ROUNDS = (1, 2, 3)


def largest_overlap(client: np.ndarray, logged: list[np.ndarray], n_rows: int) -> float:
    """The largest share of ``client``'s texts that one logged client also sent."""
    sent = np.zeros(n_rows, dtype=bool)
    sent[client] = True
    return max(float(sent[rows].sum()) / len(client) for rows in logged)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--logged", type=int, default=200, help="ordinary clients in the log")
    parser.add_argument("--clients", type=int, default=2000, help="ordinary clients compared")
    args = parser.parse_args()
    started = time.perf_counter()
    texts, victim, _, _ = corpus_lookups()
    row_of = {text: i for i, text in enumerate(texts)}
    n_rows = len(texts)
    rng = np.random.default_rng(0)
    print(
        f"Replay router: a client is flagged when one logged client sent more than the 0.1% "
        f"upper tail (over {args.clients} ordinary clients) of its texts. Log: the earlier "
        f"rounds' audits and {args.logged} ordinary clients; an ordinary client is a uniform "
        f"sample of the corpus ({n_rows} texts) as large as the audit."
    )
    for seed in args.seeds:
        key = WatermarkKey.generate(
            texts,
            victim,
            target_text=TARGET_TEXT,
            seed=seed,
            window=victim.model.max_tokens,
            marking="words",
        )
        keys = {k: key.with_audit(texts, victim, audit_round=k) for k in ROUNDS}
        assert keys[1].probe_texts == key.probe_texts  # round 1 is keygen's own audit
        rows = {k: np.unique(audit_rows(keys[k], row_of)) for k in ROUNDS}
        size = len(rows[1])
        ordinary = [np.sort(rng.choice(n_rows, size, replace=False)) for _ in range(args.logged)]
        print(f"\nkey {seed}: {size} audit texts per round ({key.audit_queries} queries)")
        print(f"  {'client':34s} {'overlap':>8s} {'ordinary':>17s} {'z':>7s}  router")
        cases = [("round 1 asked again", 1, [1]), ("round 2 after round 1", 2, [1])]
        cases.append(("round 3 after rounds 1 and 2", 3, [1, 2]))
        for label, new, earlier in cases:
            logged = [rows[k] for k in earlier] + ordinary
            null = np.array(
                [
                    largest_overlap(rng.choice(n_rows, size, replace=False), logged, n_rows)
                    for _ in range(args.clients)
                ]
            )
            value = largest_overlap(rows[new], logged, n_rows)
            threshold = float(np.quantile(null, 1 - TAIL))
            z = (value - null.mean()) / null.std()
            flag = "FLAGGED (routed)" if value > threshold else "passes"
            print(
                f"  {label:34s} {value:8.4f} {null.mean():8.4f} ± {null.std():6.4f} "
                f"{z:7.1f}  {flag}"
            )

        def service_itself(batch, key=key):  # the watermarked service: a perfect copy
            return watermark(list(batch), victim(batch), key)

        for k in ROUNDS:
            shared = np.intersect1d(rows[k], rows[1]).size / size if k > 1 else 1.0
            service = verify(service_itself, keys[k])
            twin = verify(victim, keys[k])
            print(
                f"  round {k}: {shared:.1%} of its texts in round 1; service itself p = "
                f"{service.p_value:.2g} ({service.status}), innocent twin p = "
                f"{twin.p_value:.2g} ({twin.status})"
            )
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
