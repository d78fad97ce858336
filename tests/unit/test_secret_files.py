"""Key and ring files are read only when they are regular files of bounded size (issue 36).

A path naming ``/dev/zero`` would be read until memory runs out, a FIFO would block for
ever, a directory is no key: each is refused with a clear error before anything is read,
by the key loader, the ring loader, the tenant map and the command line alike.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from espew_integrations import KeyRing, WatermarkKey
from espew_integrations.cli import main
from espew_integrations.cli.common import EXIT_USAGE
from espew_integrations.core.ground import secret_files
from espew_integrations.core.ground.errors import KeyFileError
from espew_integrations.core.ground.secret_files import (
    MAX_KEY_FILE_BYTES,
    MAX_RING_FILE_BYTES,
    read_bounded_file,
)
from espew_integrations.http.tenants import MAX_TENANT_MAP_BYTES, TenantKeys
from tests.support import make_key
from tests.unit.test_keyring import make_ring


def outcome(call, *args):
    """``call(*args)``'s result or exception, run in a daemon thread so that a call that
    blocks (the bug: opening a FIFO) fails the test instead of hanging the run."""
    done: list[object] = []

    def run():
        try:
            done.append(call(*args))
        except BaseException as exc:
            done.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=60)  # a guard against a hang only, not a timing claim
    assert not worker.is_alive(), f"{call.__qualname__} blocked on {args}"
    return done[0]


def finishes(call, *args):
    """The exception ``call(*args)`` raises, without blocking (see :func:`outcome`)."""
    error = outcome(call, *args)
    assert isinstance(error, BaseException), f"{call.__qualname__} accepted {args}"
    return error


def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "a.fifo"
    os.mkfifo(path, 0o600)
    return path


def oversize(tmp_path: Path, size: int) -> Path:
    """A sparse file of ``size`` bytes: costs no disk, and is never read whole."""
    path = tmp_path / "huge.key"
    with open(path, "wb") as handle:
        handle.truncate(size)
    path.chmod(0o600)
    return path


LOADERS = [
    pytest.param(WatermarkKey.load, "key file", MAX_KEY_FILE_BYTES, id="key"),
    pytest.param(KeyRing.load, "key ring file", MAX_RING_FILE_BYTES, id="ring"),
]


@pytest.mark.parametrize(("load", "what", "cap"), LOADERS)
def test_dev_zero_is_refused_as_a_device_not_read(load, what, cap):
    error = finishes(load, "/dev/zero")
    assert isinstance(error, KeyFileError)
    assert str(error) == (
        f"{what} /dev/zero is not a regular file (a character device); refusing to read it"
    )


@pytest.mark.parametrize(("load", "what", "cap"), LOADERS)
def test_a_fifo_is_refused_without_blocking(tmp_path, load, what, cap):
    path = fifo(tmp_path)
    error = finishes(load, path)
    assert isinstance(error, KeyFileError)
    assert f"{what} {path} is not a regular file (a FIFO)" in str(error)


@pytest.mark.parametrize(("load", "what", "cap"), LOADERS)
def test_a_directory_is_refused(tmp_path, load, what, cap):
    error = finishes(load, tmp_path)
    assert isinstance(error, KeyFileError)
    assert f"{what} {tmp_path} is not a regular file (a directory)" in str(error)


@pytest.mark.parametrize(("load", "what", "cap"), LOADERS)
def test_a_file_over_the_cap_is_refused_before_it_is_read(tmp_path, load, what, cap):
    path = oversize(tmp_path, cap + 1)
    error = finishes(load, path)
    assert isinstance(error, KeyFileError)
    assert f"is larger than the {cap:,} bytes a {what} may hold" in str(error)


def test_keys_and_rings_the_library_writes_still_load(tmp_path):
    key = make_key(64)
    assert WatermarkKey.load(key.save(tmp_path / "k.key")) == key
    ring = make_ring()
    assert KeyRing.load(ring.save(tmp_path / "r.ring")).ring_id == ring.ring_id


def test_a_file_that_grows_past_the_cap_after_the_check_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "growing.key"
    path.write_bytes(b"x" * 11)
    real_fstat = os.fstat

    def stale_fstat(fd):  # the size as it was when checked, before the file grew
        info = real_fstat(fd)
        return os.stat_result((*info[:6], 0, *info[7:]))

    monkeypatch.setattr(secret_files.os, "fstat", stale_fstat)
    with pytest.raises(KeyFileError, match="is larger than the 10 bytes"):
        read_bounded_file(path, what="key file", limit=10)
    monkeypatch.setattr(secret_files.os, "fstat", real_fstat)
    assert read_bounded_file(path, what="key file", limit=11)[0] == b"x" * 11


def test_errors_never_quote_the_content(tmp_path):
    secret = "sk-live-not-to-be-shown"
    path = tmp_path / "leaky.key"
    path.write_text(secret * 2)
    with pytest.raises(KeyFileError) as caught:
        read_bounded_file(path, what="key file", limit=10)
    assert secret not in str(caught.value)


# ---------------------------------------------------------------------- tenant files
@pytest.mark.parametrize("kind", ["device", "fifo", "directory", "oversize"])
def test_the_tenant_map_is_refused_unless_a_bounded_regular_file(tmp_path, kind):
    ring_path = make_ring().save(tmp_path / "r.ring")
    source = {
        "device": lambda: Path("/dev/zero"),
        "fifo": lambda: fifo(tmp_path),
        "directory": lambda: tmp_path,
        "oversize": lambda: oversize(tmp_path, MAX_TENANT_MAP_BYTES + 1),
    }[kind]()
    error = finishes(TenantKeys.load, ring_path, source)
    assert isinstance(error, ValueError)
    assert str(error).startswith(f"tenant map {source} is ")


def test_a_tenant_map_that_is_a_regular_file_still_loads(tmp_path):
    ring_path = make_ring().save(tmp_path / "r.ring")
    map_path = tmp_path / "tenants.json"
    map_path.write_text(json.dumps({"sk-live-0123456789": "acme"}))
    assert TenantKeys.load(ring_path, map_path).tenants == {"acme"}


# ---------------------------------------------------------------------- the command line
def test_espew_verify_refuses_a_key_path_naming_a_device(capsys):
    argv = ["verify", "--key", "/dev/zero", "--suspect", "minilm", "--no-progress"]
    assert main(argv) == EXIT_USAGE
    assert (
        "error: key file /dev/zero is not a regular file (a character device)"
        in capsys.readouterr().err
    )


def test_espew_trace_refuses_a_ring_or_tenants_file_that_is_a_fifo(tmp_path, capsys):
    path = fifo(tmp_path)
    ring_path = make_ring().save(tmp_path / "r.ring")
    tenants = tmp_path / "tenants.txt"
    tenants.write_text("alice\n")
    base = ["trace", "--suspect", "minilm", "--no-progress"]
    assert outcome(main, [*base, "--ring", str(path), "--tenants", str(tenants)]) == EXIT_USAGE
    assert f"key ring file {path} is not a regular file (a FIFO)" in capsys.readouterr().err
    assert outcome(main, [*base, "--ring", str(ring_path), "--tenants", str(path)]) == EXIT_USAGE
    assert f"tenants file {path} is not a regular file (a FIFO)" in capsys.readouterr().err
