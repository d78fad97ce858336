"""The marking designs: one module per design (words, field, map), a MarkingDesign each.

:mod:`.words` (the paper's trigger words), :mod:`.field` (every answer moved by a
keyed field along its ESpeW displacement) and :mod:`.map` (every answer moved by a
keyed linear map of its clean row, with no fixed direction). Importing this package
registers them (:func:`..mark.design.register_design`); :mod:`.units` holds what the
field and the map share;
``espew_integrations.core`` imports it, so a key file naming either loads anywhere.
"""

# Imported for their registration, not re-exported: each design is imported from its module.
from . import field, map, words  # noqa: F401
