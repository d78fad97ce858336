"""The legacy word probes: each band word put into the same templates.

Keys made before sentence probes existed, ``probes="words"`` and explicit
``templates`` audit this way. Every word is probed identically, so the probes
say nothing about which words are triggers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..ground.errors import InputError
from ..keys.key import WatermarkKey
from ..mark.words import tokenize

__all__ = ["DEFAULT_TEMPLATES", "build_probes", "check_templates"]

#: One probe per word, the word alone: padding a word with filler words dilutes
#: its pull to the target.
DEFAULT_TEMPLATES: tuple[str, ...] = ("{word}",)


def build_probes(
    words: Sequence[str], templates: Sequence[str] = DEFAULT_TEMPLATES
) -> tuple[list[str], np.ndarray]:
    """Probe texts for each word, built identically for every word.

    Returns ``(probes, owner)`` where ``owner[i]`` is the index in ``words`` of
    the word probe ``i`` was built from.

    >>> build_probes(["apple", "pear"], ("{word}", "the {word}"))
    (['apple', 'the apple', 'pear', 'the pear'], array([0, 0, 1, 1]))
    """
    templates = tuple(templates)
    if not templates or not all("{word}" in t for t in templates):
        raise InputError("every probe template must contain '{word}'")
    probes = [t.format(word=w) for w in words for t in templates]
    owner = np.repeat(np.arange(len(words)), len(templates))
    return probes, owner


def check_templates(templates: Sequence[str], key: WatermarkKey) -> None:
    """Refuse templates whose filler words are band words of ``key``.

    Why: a filler word from the band would make probes of other words contain
    that word too (and triggers carry marks into benign probes).
    """
    for template in templates:
        filler = tokenize(template.replace("{word}", " "), key.normalization)
        if set(filler) & set(key.band):
            raise InputError(
                "probe template filler words must not be band words of the key; "
                "use common function words such as 'the' or 'a'"
            )
