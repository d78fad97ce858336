"""The marking designs: one module per design, each a :class:`..mark.design.MarkingDesign`.

:mod:`.words` (the paper's trigger words) and :mod:`.field` (every answer moved by a
keyed field). Importing this package registers both (:func:`..mark.design.register_design`);
``espew_integrations.core`` imports it, so a key file naming either loads anywhere.
"""

from . import field, words

__all__ = ["field", "words"]
