"""Every default value of the package, in one place, each with the reason it has.

A default is a decision (what a key looks like, how sure a verdict must be,
how much a request may ask); a decision written in two modules drifts. So the
value lives here and every other module imports it: the key options
(:class:`..keys.key_options.KeyOptions`), the key ring, the command line and the
server all read the same line. This module imports only :mod:`.text` (a leaf),
so any module of any layer can import it without closing a circle.

Rules, not measurements, are stated here; the measurements behind each choice
are in the documents each comment names.
"""

from __future__ import annotations

from typing import Final

from .text import UNICODE_V1

__all__ = [
    "DEFAULT_ALPHA",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_DEADLINE",
    "DEFAULT_FIELD_AMPLITUDE",
    "DEFAULT_FIELD_MARKED",
    "DEFAULT_FIELD_MIN_COSINE",
    "DEFAULT_FIELD_SHARED_UNITS",
    "DEFAULT_FIELD_TENANT_UNITS",
    "DEFAULT_FIELD_UNITS",
    "DEFAULT_FREQ_BAND",
    "DEFAULT_HOST",
    "DEFAULT_KEY_VARIABLE",
    "DEFAULT_LEVEL",
    "DEFAULT_MARKING",
    "DEFAULT_MAX_REQUEST_CHARS",
    "DEFAULT_MIN_COSINE",
    "DEFAULT_MIN_COVERAGE",
    "DEFAULT_NORMALIZATION",
    "DEFAULT_N_TRIGGERS",
    "DEFAULT_PROBES_PER_WORD",
    "DEFAULT_PROBE_BUDGET",
    "DEFAULT_PROBE_MIX",
    "DEFAULT_RING_AUDIT_BUDGET",
    "DEFAULT_RING_FREQ_BAND",
    "DEFAULT_SAMPLE_ACCOUNT_BYTES",
    "DEFAULT_SAMPLE_FILE_BYTES",
    "DEFAULT_SAMPLE_TEXT_BYTES",
    "DEFAULT_SELECTION",
    "DEFAULT_SHARED_TRIGGERS",
    "DEFAULT_STALL_TIMEOUT",
    "DEFAULT_TENANT_TRIGGERS",
    "DEFAULT_TWIN_LEVEL",
    "LEGACY_PROBE_BUDGET",
]

# ---------------------------------------------------------------------- key generation
#: How many band words become triggers, and the public range the band is drawn from,
#: as document fractions. The rule is published (Kerckhoffs: a thief reads it here),
#: so it must not be cheap to strip: the band is every corpus word in a range wide
#: enough that deleting all of it from a thief's queries costs the thief most of what
#: it wants to copy, while the triggers, a keyed uniform draw over the whole range, are
#: spread over every frequency in it, so deleting its cheap (rare) part only removes a
#: proportional share of them. Why this range and how many triggers:
#: docs/limitations.md, "Threat model" and "Deleting the public band".
DEFAULT_N_TRIGGERS = 50
DEFAULT_FREQ_BAND: tuple[float, float] = (0.003, 0.05)
#: The share of coordinates a mark is written into. The paper uses 0.2; at the default
#: quality budget a larger share costs search quality nothing measurable and survives
#: distilled copies and a thief that erases its answers' smallest coordinates, which
#: 0.2 does not (docs/limitations.md). The key's constructor and keygen share it.
DEFAULT_ALPHA = 0.75
#: How a mark's coordinates are chosen: the row's smallest ``|e_o|`` (the paper), or
#: a keyed hash (``"hashed"``).
DEFAULT_SELECTION: Final = "smallest"
#: The quality budget the write strength is fitted to: mean cos(clean, watermarked)
#: over the keygen corpus's marked texts.
DEFAULT_MIN_COSINE = 0.995
#: The text normalisation triggers are matched under (:mod:`.text`).
DEFAULT_NORMALIZATION = UNICODE_V1
#: The innocent-twin check's level: a draw the clean model itself would implicate at
#: this raw p-value is thrown away at keygen.
DEFAULT_TWIN_LEVEL = 1e-3
#: How the audit's sampled texts become probes (:data:`..mark.probes.PROBE_MIXES`): over a
#: wide band most texts hold several band words, so every sampled text with a band word
#: is a probe (``"corpus"``); ``"single"`` keeps only those with exactly one, which on a
#: wide band would take most of the corpus to reach every word.
DEFAULT_PROBE_MIX = "corpus"
#: Sentence probes per band word (at most), and the audit's query budget (texts) they
#: share with the cover texts. The audit is a uniform sample of the corpus
#: (:meth:`..mark.probes.BandScan.sample`), so a band word gets as many texts as its document
#: frequency brings, whatever the band's size: a wider band costs no queries and gives
#: the rank test more words. How the budget was sized: docs/results/frontier/README.md.
DEFAULT_PROBES_PER_WORD = 28
DEFAULT_PROBE_BUDGET = 1950
#: The budget of keys made before keygen recorded it (``info["audit_budget"]``): a
#: later round of such a key's audit is drawn as large as its first was.
LEGACY_PROBE_BUDGET = 4300
#: How a key decides what to mark: ``"words"``, the paper's triggers (a text holding
#: one of the secret band words is marked); ``"field"``, every answer moved along its
#: ESpeW mark by a secret linear function of its clean embedding (:mod:`..designs.field`); or
#: ``"map"``, every answer moved by a secret linear map of its clean embedding onto
#: secret output directions (:mod:`..designs.map`). The map is the default: like the
#: field it marks every answer, so no edit of a query's words avoids it, and unlike the
#: field it has no one secret direction (the field's target) that a thief can estimate
#: from its stolen answers or guess and project out (docs/results/map/README.md).
#: ``"field"`` and ``"words"`` stay options (old keys, the paper's design).
DEFAULT_MARKING: Final = "map"
#: A map or field key's units (the drawn ones are ranked among all of them by the exact test),
#: and how many are drawn: enough units that the smallest reachable p-value is far below
#: any level, and a drawn share of a quarter, where the rank test has most power.
DEFAULT_FIELD_UNITS = 256
DEFAULT_FIELD_MARKED = 64
#: The field's scale before clipping (the gain's standard deviation over the audit):
#: large enough that a linear copy learns it, small enough that few answers reach the
#: clip.
DEFAULT_FIELD_AMPLITUDE = 0.5
#: A field key's quality budget: mean cos(clean, watermarked) over the keygen sample.
#: Every answer moves, so the binding budget is the neighbour overlap of a watermarked
#: index with a clean one: this value keeps it where the default word key keeps it, and
#: above the 0.95 budget on every key measured, with the most power that allows
#: (``benchmarks/bench_key_quality.py --only default field``).
DEFAULT_FIELD_MIN_COSINE = 0.9987

# ---------------------------------------------------------------------- key rings
#: The shared layer every tenant key carries, and each tenant's own layer, in words.
DEFAULT_SHARED_TRIGGERS = 20
DEFAULT_TENANT_TRIGGERS = 20
#: A ring's band: tenant layers are drawn from the band words outside the shared
#: layer, and telling many tenants apart needs more band words than the single key's
#: default band holds on a small corpus. The traced figures (docs/tenants.md) are
#: measured on this band.
DEFAULT_RING_FREQ_BAND: tuple[float, float] = (0.005, 0.01)
#: A ring's audit, in texts: the traced figures were measured with this sample, and a
#: tenant layer's words get fewer texts each than the single key's, so the ring keeps
#: the larger budget (a smaller ring audit is unmeasured).
DEFAULT_RING_AUDIT_BUDGET = 4300
#: A field ring's layers, in field units (:mod:`..mark.field`): together as many drawn units as
#: a single field key's, so a tenant's gain has the single key's spread (and its quality
#: budget), split evenly between the shared layer, which convicts, and the tenant's own,
#: which names the account.
DEFAULT_FIELD_SHARED_UNITS = DEFAULT_FIELD_MARKED // 2
DEFAULT_FIELD_TENANT_UNITS = DEFAULT_FIELD_MARKED - DEFAULT_FIELD_SHARED_UNITS

# ---------------------------------------------------------------------- verification
#: The false-positive rate a "copied" verdict is held below.
DEFAULT_LEVEL = 1e-6
#: Texts an audit sends the suspect in one call: what a served embeddings API takes in
#: one request without splitting it, and few enough that a stalled call loses little.
DEFAULT_BATCH_SIZE = 64
#: The share of the band's words (a field key's units) an audit must score before a
#: verdict rests on them, and of probes answered before "not copied" may be said: below
#: it the suspect's faults, not its answers, would decide, so the audit is inconclusive.
DEFAULT_MIN_COVERAGE = 0.9
#: The stall guard: seconds an audit waits for any one answer of the suspect before it
#: stops asking and ends inconclusive. Every answer restarts it, so an audit that keeps
#: getting answers is never cut, however slow the suspect (a CPU model may need many
#: minutes for a whole audit); a suspect that stops answering ends the audit this long
#: after its last answer. It is longer than the HTTP client takes, at its defaults, to
#: give up on a batch a dead endpoint never answers (five attempts of a 30 s read
#: timeout, with backoff), so the client's own error names that fault first; and shorter
#: than the five minutes within which a stalled suspect's audit is promised to end
#: (docs/verification.md). ``None`` means no stall guard.
DEFAULT_STALL_TIMEOUT = 240.0
#: Seconds an audit may spend asking the suspect, all batches together, when a caller
#: sets a bound (``deadline=`` / ``--deadline``): at the deadline the audit ends
#: inconclusive. None by default: the stall guard, not a total, ends a stalled audit,
#: so a healthy audit of a slow suspect finishes.
DEFAULT_DEADLINE: float | None = None

# ---------------------------------------------------------------------- serving
#: The environment variable a key (a path, or the key's JSON) is read from.
DEFAULT_KEY_VARIABLE = "ESPEW_KEY"
#: The address ``espew serve`` binds unless told otherwise: this machine only.
DEFAULT_HOST = "127.0.0.1"
#: The characters one embeddings request may carry: a request's model time grows with
#: its characters, so this bounds how long one request can hold a worker.
DEFAULT_MAX_REQUEST_CHARS = 200_000
#: Seconds a client has to send a whole request body, stalled or trickling.
DEFAULT_BODY_TIMEOUT = 30.0

# ---------------------------------------------------------------------- traffic sample
#: The most a traffic sample stores of one text, in UTF-8 bytes, after it is cut where
#: the model stops reading (its window): a full window of ordinary prose fits whole, so
#: the cap only shortens texts made of very long tokens, and one client's huge inputs
#: cannot make the sample's file outgrow what reading it back allows.
DEFAULT_SAMPLE_TEXT_BYTES = 4096
#: The most one account's sample holds, in bytes as written in the file: the default
#: count of texts (20,000) at a generous average size, so ordinary traffic fills the
#: count before the bytes, while an account that sends only long texts is held to its
#: own share and never grows into another's.
DEFAULT_SAMPLE_ACCOUNT_BYTES = 32 * 2**20
#: The most the whole sample holds (the file, and the texts a serving process keeps in
#: memory): room for a few dozen full accounts and many more ordinary ones. A new
#: account is sampled only while there is room for one full account besides, so an
#: unauthenticated server whose clients invent credentials cannot push out an account
#: already in the sample.
DEFAULT_SAMPLE_FILE_BYTES = 2**30
