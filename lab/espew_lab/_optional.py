"""The lab's optional imports: import one, or fail with the line that installs it.

espew-lab is a distribution of its own (``lab/`` in the espew-integrations
repository), so its install lines name it, not an extra of the plugin. Its
dependencies (scikit-learn, matplotlib, tqdm, pyyaml) come with it; the
lazy imports below still go through :func:`require`, so a broken install names
the package and the line instead of a bare ``ModuleNotFoundError``. The end-to-end
neural thief needs torch, the ``[torch]`` extra.

>>> require("json", "lab", "a doctest").__name__
'json'
>>> install_line("torch").endswith("once published, pip install 'espew-lab[torch]'")
True
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from espew_integrations.core.ground.errors import MissingExtraError

__all__ = ["LAB_INSTALL", "install_line", "require"]

#: The distribution name of an import name, where the two differ (what pip is told).
_DISTRIBUTIONS = {"sklearn": "scikit-learn", "yaml": "pyyaml"}


def install_line(extra: str = "lab") -> str:
    """How to install the lab (``"lab"``) or one of its extras (``"torch"``).

    The checkout line comes first (espew-integrations itself installed from the
    same checkout), the published form ends the line; no host is named (the project
    has no confirmed public address).

    >>> install_line().startswith("pip install ./lab in a checkout")
    True
    """
    if extra in ("lab", ""):
        return (
            "pip install ./lab in a checkout of espew-integrations; "
            "once published, pip install espew-lab"
        )
    return (
        f"pip install './lab[{extra}]' in a checkout of espew-integrations; "
        f"once published, pip install 'espew-lab[{extra}]'"
    )


#: The one spelling of "install the lab" in the lab's messages.
LAB_INSTALL = install_line()


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """``module`` imported, or a ``MissingExtraError`` naming ``purpose`` and the install line.

    ``extra`` is ``"lab"`` (what espew-lab itself depends on) or one of its
    extras (``"torch"``). Only a module that is absent becomes this error; one
    that is installed but fails while importing raises its own error.
    """
    top = module.partition(".")[0]
    if importlib.util.find_spec(top) is None:
        package = _DISTRIBUTIONS.get(top, top)
        raise MissingExtraError(
            f"{package} is needed for {purpose}: {install_line(extra)}", name=top
        )
    return importlib.import_module(module)
