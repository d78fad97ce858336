"""Writing and reading files that hold a secret (keys, key rings).

One implementation of the hygiene every secret file gets: mode 0600 from the
first byte, an atomic write (temporary file, fsync, rename) so a crash never
leaves half a secret, no silent overwrite, and a warning, as ssh gives, when
a file is readable by others. Reading takes only a regular file of bounded
size (:func:`read_bounded_file`): a path naming ``/dev/zero`` would otherwise
be read until memory runs out, and a FIFO would block for ever. Errors name
the path and what went wrong, never the content.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import stat
import warnings
from collections.abc import Collection, Iterable
from pathlib import Path
from typing import Any

from .errors import KeyFileError, PathExistsError

#: The largest key file read. A key stores its audit: each audit text with its clean
#: embedding row, one int8 code per coordinate (base64 in the file), so a key grows
#: with its audit budget times the model's dimension. The cap leaves room for large
#: audit budgets at the widest dimension an audit accepts (``verify.MAX_ANSWER_DIM``),
#: with margin, and stops anything bigger before it is read into memory and parsed.
MAX_KEY_FILE_BYTES = 256 * 2**20
#: The largest key ring file read: a ring is its shared key (with that key's audit)
#: plus a master secret and its layer settings, so the key's cap and room to spare.
MAX_RING_FILE_BYTES = MAX_KEY_FILE_BYTES + 16 * 2**20

# Opening with O_NONBLOCK makes a FIFO with no writer open at once (then be refused)
# instead of blocking; it changes nothing for a regular file.
_READ_FLAGS = (
    os.O_RDONLY
    | getattr(os, "O_NONBLOCK", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
    | getattr(os, "O_BINARY", 0)
)
_CHUNK = 2**20

__all__ = [
    "MAX_KEY_FILE_BYTES",
    "MAX_RING_FILE_BYTES",
    "canonical_json",
    "parse_sealed_document",
    "read_bounded_file",
    "read_secret_file",
    "replace_atomically",
    "seal_document",
    "write_secret_file",
]


def write_secret_file(
    path: str | os.PathLike[str], data: bytes, *, overwrite: bool, what: str, keep_hint: str
) -> Path:
    """Atomically write ``data`` to ``path`` with mode 0600.

    Refuses to replace an existing file unless ``overwrite``; ``keep_hint``
    says why the old file matters (it ends the FileExistsError message).
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise PathExistsError(
            f"{what} {path} already exists; pass overwrite=True to replace it ({keep_hint})"
        )
    replace_atomically(path, (data,))
    return path


def replace_atomically(path: Path, chunks: Iterable[bytes]) -> int:
    """Write ``chunks`` to ``path`` with mode 0600, atomically; returns the bytes written.

    Streamed to a temporary file beside it (created exclusively, never readable by
    others), fsynced, then renamed over ``path``: a reader sees the old file or the
    new one, never a part. The one write of every secret file and of the traffic
    sample.
    """
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    written = 0
    try:
        with os.fdopen(fd, "wb") as handle:
            for chunk in chunks:
                handle.write(chunk)
                written += len(chunk)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return written


def read_secret_file(
    path: str | os.PathLike[str],
    *,
    what: str,
    warning: type[Warning],
    stacklevel: int = 3,
    limit: int = MAX_KEY_FILE_BYTES,
) -> bytes:
    """The bytes of a secret file; KeyFileError (no content quoted) if it cannot be read.

    Only a regular file of at most ``limit`` bytes is read (:func:`read_bounded_file`).
    Warns with ``warning`` when the file is accessible by group or others.
    """
    data, mode = read_bounded_file(path, what=what, limit=limit)
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        warnings.warn(
            f"{what} {path} is accessible by group or others (mode "
            f"{stat.S_IMODE(mode):o}); restrict it with chmod 600",
            warning,
            stacklevel=stacklevel,
        )
    return data


def read_bounded_file(path: str | os.PathLike[str], *, what: str, limit: int) -> tuple[bytes, int]:
    """The bytes and mode of the regular file at ``path``, of at most ``limit`` bytes.

    Why so guarded: a path may name a device (``/dev/zero`` never ends), a FIFO
    (opening or reading one blocks until a writer comes) or a directory. The file
    is opened without blocking and checked on the opened descriptor, so what is
    checked is what is read; at most ``limit + 1`` bytes are read, so a file that
    grows after the check is refused too. Errors are :class:`KeyFileError`
    naming ``what`` and the path, never the content.
    """
    path = Path(path)
    try:
        fd = os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        raise KeyFileError(f"{what} not found: {path}") from None
    except PermissionError:
        raise KeyFileError(f"{what} {path} is not readable by this user") from None
    except OSError as exc:
        raise KeyFileError(f"{what} {path} cannot be read ({exc.strerror})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = _file_kind(info.st_mode)
            raise KeyFileError(f"{what} {path} is not a regular file ({kind}); refusing to read it")
        data = b"" if info.st_size > limit else _read_at_most(fd, limit + 1)
    except OSError as exc:
        raise KeyFileError(f"{what} {path} cannot be read ({exc.strerror})") from None
    finally:
        os.close(fd)
    if info.st_size > limit or len(data) > limit:
        raise KeyFileError(
            f"{what} {path} is larger than the {limit:,} bytes a {what} may hold; "
            "refusing to read it (is it the right file?)"
        )
    return data, info.st_mode


def _read_at_most(fd: int, size: int) -> bytes:
    """Up to ``size`` bytes from ``fd``, fewer only at the end of the file."""
    chunks: list[bytes] = []
    left = size
    while left > 0:
        chunk = os.read(fd, min(left, _CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _file_kind(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    )
    return next((name for test, name in kinds if test(mode)), "not a plain file")


# ---------------------------------------------------------------------- sealed documents
def canonical_json(obj: Any) -> bytes:
    """The one byte form of a JSON value that checksums and ids are computed on."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def seal_document(
    *, format: str, version: int, field: str, payload: dict[str, Any], **header: Any
) -> str:
    """The JSON text of a secret file: format, version, ``header``, payload and its checksum.

    The checksum (SHA-256 of the payload's canonical form) catches a corrupted
    or hand-edited file at load time, before a wrong secret is used.
    """
    document = {
        "format": format,
        "version": version,
        field: payload,
        "checksum": hashlib.sha256(canonical_json(payload)).hexdigest(),
        **header,
    }
    return json.dumps(document, indent=1, sort_keys=True)


def parse_sealed_document(
    text: str | bytes,
    *,
    source: str,
    format: str,
    versions: Collection[int],
    field: str,
    what: str,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(document, payload) of :func:`seal_document`'s text, or KeyFileError naming the fault.

    ``what`` names the kind of file in messages ("key", "key ring"); no
    message quotes the content.
    """
    try:
        document = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise KeyFileError(f"{source} is not valid JSON (corrupt {what} file?)") from None
    except RecursionError:
        raise KeyFileError(f"{source} is nested too deeply to be a {what} file") from None
    if not isinstance(document, dict) or document.get("format") != format:
        raise KeyFileError(f"{source} is not an espew {what} (missing format {format!r})")
    version = document.get("version")
    if version not in versions or isinstance(version, bool):
        raise KeyFileError(
            f"{source} has {what} format version {version!r}; this library reads versions "
            f"{tuple(versions)}. Upgrade espew-integrations."
        )
    payload = document.get(field)
    if not isinstance(payload, dict):
        raise KeyFileError(f"{source} has no {field!r} object (corrupt {what} file)")
    if hashlib.sha256(canonical_json(payload)).hexdigest() != document.get("checksum"):
        raise KeyFileError(
            f"{source} fails its checksum: the file was corrupted or edited. "
            "Restore it from your backup."
        )
    return document, payload
