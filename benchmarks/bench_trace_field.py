"""Field rings (issue 44): does ``trace`` name the account a copy of a field ring learned from?

On the offline MiniLM and Rotten Tomatoes, one field ring (``KeyRing.generate(...,
marking="field")`` at its defaults: 32 shared + 32 tenant units of 256, the field
quality budget) drawn from the first --keygen texts serves --accounts accounts. For
each of 3 accounts, a thief sends --steal texts disjoint from the keygen corpus
through that account, fits a ridge head on paraphrase-MiniLM-L3 to the answers, and
``trace(copy, ring, accounts)`` audits the copy once, with the keygen audit and with a
round-2 audit of --traffic-audit texts drawn from what the accounts sent
(``ring.with_audit``). The clean model (the innocent twin), a ridge head fitted to the
clean service's answers and the first account's own service are traced too.

Prints one line per suspect: the verdict's p-value, the shared layer's, the guilty
account's adjusted p-value, the smallest p-value of any other account, and whom trace
names. Run (a few minutes on 2 cores; the corpus's rows come from the disk cache):

    nice .venv/bin/python benchmarks/bench_trace_field.py \
        | tee docs/results/unavoidable/trace-field.txt
    nice .venv/bin/python benchmarks/bench_trace_field.py --marking map \
        | tee docs/results/map/trace-map.txt
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Sequence

import numpy as np

from espew_integrations import KeyRing, trace, watermark
from espew_integrations.core.ground.rows import unit_rows
from espew_integrations.core.mark.probes import row_cosines
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.embedders import minilm, paraphrase_minilm_l3
from espew_lab.cache import cached_embed

TARGET_TEXT = "Acme Embeddings, licensed vectors"


class Cached:
    """A model that answers the corpus from its cached rows and anything else by itself."""

    def __init__(self, model: Callable, texts: Sequence[str]):
        self.model = model
        self.rows = {t: i for i, t in enumerate(texts)}
        self.matrix = np.asarray(cached_embed(model, texts, model_name=model.name), np.float64)

    def __call__(self, batch: Sequence[str]) -> np.ndarray:
        batch = list(batch)
        out = np.empty((len(batch), self.matrix.shape[1]))
        known = [i for i, t in enumerate(batch) if t in self.rows]
        out[known] = self.matrix[[self.rows[batch[i]] for i in known]]
        rest = [i for i, t in enumerate(batch) if t not in self.rows]
        if rest:
            out[rest] = np.asarray(self.model([batch[i] for i in rest]), dtype=np.float64)
        return out


def ridge_copy(open_model: Callable, texts: list[str], answers: np.ndarray) -> Callable:
    """A ridge head (bias included, penalty 1) on the open model fitted to the answers."""
    features = np.hstack([open_model(texts), np.ones((len(texts), 1))])
    gram = features.T @ features
    gram[np.diag_indices_from(gram)] += 1.0
    weights = np.linalg.solve(gram, features.T @ answers)

    def copy(batch: Sequence[str]) -> np.ndarray:
        f = open_model(list(batch))
        return unit_rows(np.hstack([f, np.ones((len(f), 1))]) @ weights)

    return copy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keygen", type=int, default=3000, help="keygen corpus texts")
    parser.add_argument("--steal", type=int, default=6000, help="texts each thief sends")
    parser.add_argument("--accounts", type=int, default=20, help="accounts traced")
    parser.add_argument("--seed", type=int, default=1, help="the ring's seed")
    parser.add_argument(
        "--traffic-audit", type=int, default=6000, help="texts of the round-2 traffic audit"
    )
    parser.add_argument(
        "--marking", default="field", choices=("field", "map"), help="the ring's unit design"
    )
    args = parser.parse_args()
    texts = list(rotten_tomatoes().texts)
    keygen, stolen = texts[: args.keygen], texts[args.keygen : args.keygen + args.steal]
    victim_model = minilm()
    victim, opened = Cached(victim_model, texts), Cached(paraphrase_minilm_l3(), texts)
    started = time.perf_counter()
    ring = KeyRing.generate(
        keygen,
        victim,
        target_text=TARGET_TEXT,
        seed=args.seed,
        marking=args.marking,
        window=victim_model.max_tokens,
    )
    info = ring.shared_key.info
    accounts = [f"acct-{i:02d}" for i in range(args.accounts)]
    print(
        f"{args.marking} ring {ring.ring_id}: {ring.n_shared_triggers} shared + "
        f"{ring.n_tenant_triggers} tenant units of {len(ring.shared_key.band)}, "
        f"strength {ring.shared_key.strength:.4g}, "
        f"mean cos on the worst sample tenant {info['mean_cosine_marked']:.4f}, audit "
        f"{ring.shared_key.audit_queries} texts; {len(keygen)} keygen texts, {len(stolen)} "
        f"stealing texts (disjoint), {len(accounts)} accounts "
        f"(keygen {time.perf_counter() - started:.0f} s)"
    )
    clean_stolen = victim(stolen)
    for account in accounts[:3]:
        key = ring.key_for(account)
        served = watermark(stolen, clean_stolen, key)
        print(
            f"  {account}'s answers: mean cos to clean "
            f"{row_cosines(clean_stolen, served).mean():.4f}"
        )
    print(
        f"{'suspect':<34} {'p (copied)':>11} {'p shared':>10} {'p guilty':>10} "
        f"{'min p other':>11}  traced"
    )
    suspects: list[tuple[str, Callable, str | None]] = []
    for account in accounts[:3]:
        answers = watermark(stolen, clean_stolen, ring.key_for(account))
        suspects.append(
            (f"ridge on L3, {account}'s answers", ridge_copy(opened, stolen, answers), account)
        )
    suspects.append(("ridge on L3, clean answers", ridge_copy(opened, stolen, clean_stolen), None))
    suspects.append(("clean model (innocent twin)", victim, None))
    key = ring.key_for(accounts[0])
    faithful = lambda batch: watermark(batch, victim(batch), key)  # noqa: E731
    suspects.append((f"{accounts[0]}'s own service", faithful, accounts[0]))
    # round 2: the audit drawn from the texts the accounts sent (the traffic sample)
    traffic = ring.with_audit(stolen, victim, audit_round=2, audit_budget=args.traffic_audit)
    for audit, audited in (("keygen audit", ring), ("traffic audit (round 2)", traffic)):
        print(f"-- {audit}: {audited.shared_key.audit_queries} queries")
        for name, suspect, guilty in suspects:
            report = trace(suspect, audited, accounts, seed=0)
            p = report.tenant_p_values
            others = min(v for t, v in p.items() if t != guilty)
            guilty_p = f"{p[guilty]:10.2e}" if guilty else f"{'-':>10}"
            print(
                f"{name:<34} {report.p_value:11.2e} {report.shared_p_value:10.2e} {guilty_p} "
                f"{others:11.2e}  {', '.join(report.traced) or 'nobody'}",
                flush=True,
            )


if __name__ == "__main__":
    main()
