"""``python -m espew_lab lab --config default``: the lab without the main CLI."""

from .cli import main

raise SystemExit(main())
