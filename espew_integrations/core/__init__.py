"""The framework-free core: the standard library, numpy and scipy only.

It re-exports nothing: each name has one address, the module that owns it (and, for
what a user imports, the package root :mod:`espew_integrations`). Its
:func:`~espew_integrations.core.verify.verify_callable` takes a callable suspect; the package
root's :func:`espew_integrations.verify` also takes framework objects (see
:mod:`espew_integrations.suspects`).
"""

# The built-in marking designs register themselves (words, field): imported here, the
# package every core module is loaded through, a key file naming either loads anywhere.
from . import designs as designs

# report.save() writes through the records room (the audit writes no file): loaded here,
# its evidence writer is installed wherever a report is made.
from .records import evidence as _records_evidence  # noqa: F401  (installs the writer)
