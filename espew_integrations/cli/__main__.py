"""``python -m espew_integrations.cli``: the ``espew`` command."""

import sys

from . import main

sys.exit(main())
