"""Setting checks shared by the HTTP client (``OpenAIEndpoint``) and the proxy's upstream.

Both talk to an OpenAI-compatible embeddings API and take the same base URL,
model name and encoding; a bad one must be refused up front, with a
``ValueError`` that names the setting, before anything is sent.
"""

from __future__ import annotations

from ..core.ground.errors import InputError

__all__ = ["check_endpoint", "check_positive_int", "check_seconds"]


def check_endpoint(base_url: object, model: object, encoding_format: object, *, whose: str) -> None:
    """The base URL is http(s), the model a non-empty string, the encoding float or base64.

    ``whose`` names the other side in the model message ("endpoint", "upstream").
    """
    if not isinstance(base_url, str) or not base_url.startswith(("http://", "https://")):
        raise InputError(f"base_url must start with http:// or https://, got {base_url!r}")
    if not isinstance(model, str) or not model:
        raise InputError(f"model must be a non-empty string (the {whose}'s model name)")
    if encoding_format not in ("float", "base64"):
        raise InputError(f"encoding_format must be float or base64, got {encoding_format!r}")


def check_positive_int(name: str, value: object, *, minimum: int = 1) -> None:
    """``value`` is an int (not a bool) >= ``minimum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"{name} must be an integer >= {minimum}, got {value!r}")


def check_seconds(name: str, value: object) -> None:
    """``value`` is a finite number of seconds > 0."""
    if isinstance(value, bool) or not (
        isinstance(value, (int, float)) and 0 < value < float("inf")
    ):
        raise InputError(f"{name} must be a positive number of seconds, got {value!r}")
