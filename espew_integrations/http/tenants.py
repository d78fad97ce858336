"""Per-customer keys in the server: each client API key is one tenant of a
:class:`~..core.keys.keyring.KeyRing`.

Why: a provider serving many API customers wants a stolen copy to name the
account whose answers trained it. ``espew serve --ring RING
--tenants map.json`` watermarks each request with ``ring.key_for(tenant)``,
the tenant being the one whose API key the client sent as
``Authorization: Bearer <key>``; an unknown or missing API key gets a 401.

The map file is a JSON object from API key to tenant id::

    {"sk-live-3f9a...": "acme-corp", "sk-live-77b2...": "globex"}

It holds credentials: it is read once at start-up, and only SHA-256 digests of
the API keys are kept in memory (lookups compare digests, so a lookup's time
says nothing about how much of a guessed key was right). No API key appears
in a repr, a log line or an error message; tenant ids are not secret.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Mapping
from typing import Any

from ..core.ground.errors import InputError, InputTypeError
from ..core.ground.secret_files import read_bounded_file
from ..core.keys.key import WatermarkKey

__all__ = ["MAX_TENANT_MAP_BYTES", "TenantKeys"]

#: The largest tenant map (or tenants list) read: one short entry per account, an API
#: key and an account id, so the cap leaves room for millions of accounts and stops a
#: device, a FIFO's endless stream or a runaway file before it fills memory.
MAX_TENANT_MAP_BYTES = 256 * 2**20


def _digest(api_key: str) -> bytes:
    return hashlib.sha256(api_key.encode("utf-8")).digest()


class TenantKeys:
    """API key -> tenant id -> that tenant's :class:`WatermarkKey` (derived once, then cached)."""

    def __init__(self, ring: Any, api_keys: Mapping[str, str]):
        if not isinstance(api_keys, Mapping) or not api_keys:
            raise InputError("the tenant map must be a non-empty object {api_key: tenant_id}")
        by_digest: dict[bytes, str] = {}
        for position, (api_key, tenant) in enumerate(api_keys.items()):
            if not isinstance(api_key, str) or len(api_key.strip()) < 8:
                raise InputError(
                    f"entry {position} of the tenant map: the API key must be a string of at "
                    "least 8 characters"
                )
            if not isinstance(tenant, str) or not tenant.strip():
                raise InputError(
                    f"entry {position} of the tenant map: the tenant id must be a non-empty string"
                )
            by_digest[_digest(api_key)] = tenant
        self._ring = ring
        self._by_digest = by_digest
        self._keys: dict[str, WatermarkKey] = {}
        self._lock = threading.Lock()

    @classmethod
    def load(
        cls, ring_path: str | os.PathLike[str], map_path: str | os.PathLike[str]
    ) -> TenantKeys:
        """A ring file (``KeyRing.load``) and a JSON map file of API key -> tenant id.

        The map is read only if it is a regular file of at most
        :data:`MAX_TENANT_MAP_BYTES` (a :class:`~..core.ground.errors.KeyFileError`, a
        ``ValueError``, if not).
        """
        from ..core.keys.keyring import KeyRing

        ring = KeyRing.load(ring_path)
        data, _ = read_bounded_file(map_path, what="tenant map", limit=MAX_TENANT_MAP_BYTES)
        try:
            api_keys = json.loads(data.decode("utf-8"))
        except ValueError:
            # The message must not quote the file: it is full of API keys.
            raise InputError(f"the tenant map {map_path} is not valid JSON") from None
        if not isinstance(api_keys, dict):
            raise InputError(
                f"the tenant map {map_path} must be a JSON object {{api_key: tenant_id}}"
            )
        return cls(ring, api_keys)

    @property
    def ring_id(self) -> str:
        """The ring's public fingerprint."""
        return self._ring.ring_id

    @property
    def tenants(self) -> frozenset[str]:
        """The tenant ids of the map."""
        return frozenset(self._by_digest.values())

    @property
    def shared_key(self) -> WatermarkKey:
        """The layer every tenant carries, as a key (start-up checks: dimension, model)."""
        return self._ring.shared_key

    def tenant_for_api_key(self, api_key: str) -> str | None:
        """The tenant id of ``api_key``, or None for an unknown one."""
        return self._by_digest.get(_digest(api_key))

    def key_for_api_key(self, api_key: str) -> WatermarkKey | None:
        """The key to watermark ``api_key``'s requests with, or None for an unknown one."""
        tenant = self.tenant_for_api_key(api_key)
        if tenant is None:
            return None
        key = self._keys.get(tenant)
        if key is None:
            with self._lock:
                key = self._keys.get(tenant)
                if key is None:
                    key = self._keys[tenant] = self._ring.key_for(tenant)
        return key

    def __repr__(self) -> str:
        return f"TenantKeys(ring_id={self.ring_id!r}, tenants={len(self.tenants)})"

    def __reduce_ex__(self, protocol: object) -> Any:
        raise InputTypeError("TenantKeys refuses to be pickled (it holds a key ring)")
