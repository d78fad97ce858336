"""``espew``: generate a key, watermark texts, serve a model, audit a suspect.

Exit codes (stable, for scripts and CI):

- 0: not copied (or, for keygen/embed/serve, success);
- 1: copied, the suspect carries the key's watermark;
- 2: inconclusive, no verdict could be reached (endpoint faults, too few answers);
- 3: usage error (bad arguments, missing or corrupt files, unknown specs).

A crash therefore never reads as a verdict. Files are handled so that nothing is
lost or clobbered silently: ``--report-dir`` is checked (a real, writable
directory, no planted symlinks, no earlier evidence unless ``--force``) before
the first query is sent, and ``--out`` files are written atomically and never
replace an existing file without ``--force``. Nothing ``espew`` prints quotes
the value of ``ESPEW_KEY`` or of any variable named by ``--key env:VAR`` /
``--api-key-env``: such values are withheld from every message and traceback.

Commands register themselves with
``set_defaults(func=callable(args) -> int)``; the robustness lab adds its own
(``lab``, ``tune``) through :func:`espew_integrations.lab.cli.add_commands`.

Embedder and suspect specs:

- ``minilm`` (the offline default), ``paraphrase-minilm-l3``;
- ``openai:<base_url>#<model>``, e.g. ``openai:http://127.0.0.1:8000/v1#acme-embed``;
- ``module:attr`` or ``path/to/file.py:attr``, an object in a Python module
  (the current directory is importable); ``module:attr()`` calls it first
  (a factory). The object is a callable ``list[str] -> array`` or anything
  :func:`espew_integrations.as_suspect` understands (LangChain, LlamaIndex,
  Chroma embedders).

>>> main(["verify", "--key", "provider.key",                        # doctest: +SKIP
...       "--suspect", "openai:http://127.0.0.1:8000/v1#their-model"])
1
"""

from __future__ import annotations

import argparse
import csv
import importlib
import importlib.util
import inspect
import json
import os
import sys
import tempfile
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

__all__ = [
    "EXIT_COPIED",
    "EXIT_INCONCLUSIVE",
    "EXIT_NOT_COPIED",
    "EXIT_USAGE",
    "UsageError",
    "build_parser",
    "load_key",
    "main",
    "read_texts",
    "resolve_embedder",
]

EXIT_NOT_COPIED = 0
EXIT_COPIED = 1
EXIT_INCONCLUSIVE = 2
EXIT_USAGE = 3
_EXIT_BY_STATUS = {"not_copied": EXIT_NOT_COPIED, "copied": EXIT_COPIED}

BUNDLED_CORPORA = ("rotten_tomatoes", "health_tweets")
DEFAULT_KEY_VARIABLE = "ESPEW_KEY"
_FRAGMENT_CHARS = 16  # a quoted piece of a secret this long withholds the line
NAMED_EMBEDDERS = ("minilm", "paraphrase-minilm-l3")


class UsageError(Exception):
    """The command line, a file or a spec is wrong; ``espew`` exits with 3."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors with exit code 3 (argparse's own is 2,
    which ``espew verify`` uses for "inconclusive")."""

    def error(self, message: str) -> Any:
        self.print_usage(sys.stderr)
        raise UsageError(f"{self.prog}: {message}")


# ---------------------------------------------------------------------- specs
def load_key(source: str) -> Any:
    """A key from a file path, or from an environment variable with ``env:VAR``.

    >>> load_key("provider.key")       # doctest: +SKIP
    >>> load_key("env:ESPEW_KEY")      # doctest: +SKIP
    """
    from .core.key import WatermarkKey

    if source.startswith("env:"):
        return WatermarkKey.from_env(source[4:] or "ESPEW_KEY")
    return WatermarkKey.load(source)


def _import_object(spec: str) -> Any:
    """The object named by ``module:attr`` / ``file.py:attr`` (``attr()`` calls it)."""
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise UsageError(f"spec {spec!r} is not of the form module:attr")
    call = attr.endswith("()")
    attr = attr[:-2] if call else attr
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)  # like `python -m`: local modules are importable
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise UsageError(f"no Python file {path} (from spec {spec!r})")
        module_spec = importlib.util.spec_from_file_location(f"_espew_spec_{path.stem}", path)
        if module_spec is None or module_spec.loader is None:
            raise UsageError(f"cannot import {path}")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_spec.name] = module
        module_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as exc:
            raise UsageError(f"cannot import module {target!r} from spec {spec!r}: {exc}") from None
    obj: Any = module
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise UsageError(f"module {target!r} has no attribute {attr!r}") from None
    return obj() if call else obj


def _openai_endpoint(spec: str, options: dict[str, Any]) -> Any:
    from .http.client import OpenAIEndpoint

    rest = spec[len("openai:") :]
    base_url, _, model = rest.partition("#")
    if not base_url or not model:
        raise UsageError(
            f"spec {spec!r} must be openai:<base_url>#<model>, "
            "e.g. openai:http://127.0.0.1:8000/v1#my-model"
        )
    options = dict(options)
    variable = options.pop("api_key_env", None)
    api_key = None
    if variable:
        api_key = os.environ.get(variable)
        if not api_key:
            raise UsageError(f"environment variable {variable} (--api-key-env) is not set")
    try:
        return OpenAIEndpoint(base_url, model, api_key, **options)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def resolve_embedder(
    spec: str, *, endpoint_options: dict[str, Any] | None = None
) -> tuple[Callable[[list[str]], Any], str]:
    """``(embed, name)`` for an embedder or suspect spec (see the module docstring).

    >>> embed, name = resolve_embedder("minilm")   # doctest: +SKIP
    >>> name
    'all-MiniLM-L6-v2-int8'
    """
    from .core.adapters import as_suspect

    if spec in NAMED_EMBEDDERS:
        from . import embedders

        model = embedders.minilm() if spec == "minilm" else embedders.paraphrase_minilm_l3()
        return model, model.name
    if spec.startswith("openai:"):
        endpoint = _openai_endpoint(spec, endpoint_options or {})
        return endpoint, endpoint.model
    if ":" not in spec:
        raise UsageError(
            f"unknown embedder {spec!r}: use one of {', '.join(NAMED_EMBEDDERS)}, "
            "openai:<base_url>#<model> or module:attr"
        )
    obj = _import_object(spec)
    name = str(getattr(obj, "name", "") or spec.rpartition(":")[2].rstrip("()"))
    if callable(obj) and not hasattr(obj, "embed_documents"):
        return obj, name  # keep the embedder's own dtype
    try:
        return as_suspect(obj), name
    except TypeError as exc:
        raise UsageError(f"{spec!r}: {exc}") from None


def read_texts(path: str | os.PathLike[str], *, column: str | None = None) -> list[str]:
    """Texts from a ``.txt`` (one per line), ``.csv`` or ``.jsonl`` file.

    CSV and JSONL take the ``column`` field (default ``text``; a one-column CSV
    needs no name). Blank lines are skipped; an empty result is an error.

    >>> read_texts("reviews.csv", column="review")   # doctest: +SKIP
    """
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"no such file: {path}")
    suffix = path.suffix.lower()
    texts: list[str] = []
    with path.open(encoding="utf-8", newline="") as handle:
        if suffix == ".csv":
            reader = csv.DictReader(handle)
            fields = reader.fieldnames or []
            name = column or ("text" if "text" in fields or len(fields) != 1 else fields[0])
            if name not in fields:
                raise UsageError(
                    f"{path} has no column {name!r}; its columns are {fields}. "
                    "Pick one with --text-column."
                )
            texts = [str(row[name] or "") for row in reader]
        elif suffix in (".jsonl", ".ndjson"):
            name = column or "text"
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    item = json.loads(line)
                except json.JSONDecodeError:
                    raise UsageError(f"{path}:{number} is not valid JSON") from None
                if isinstance(item, str):
                    texts.append(item)
                elif isinstance(item, dict) and isinstance(item.get(name), str):
                    texts.append(item[name])
                else:
                    raise UsageError(f"{path}:{number} has no string field {name!r}")
        else:
            texts = handle.read().splitlines()
    texts = [t.strip() for t in texts if t and t.strip()]
    if not texts:
        raise UsageError(f"{path} contains no texts")
    return texts


def _progress(total: int | None, desc: str, unit: str, enabled: bool) -> Any:
    from tqdm.auto import tqdm

    # disable=None: shown on a terminal, silent in pipes and CI logs.
    return tqdm(total=total, desc=desc, unit=unit, disable=None if enabled else True)


def _counting(embed: Callable[[list[str]], Any], bar: Any) -> Callable[[list[str]], Any]:
    def wrapped(texts: list[str]) -> Any:
        out = embed(texts)
        bar.update(len(texts))
        return out

    return wrapped


# ---------------------------------------------------------------------- files
def _prepare_report_dir(directory: str | os.PathLike[str], *, force: bool) -> Path:
    """Create and check the evidence directory; raises ``UsageError`` when unusable.

    Why before the audit: a directory that cannot be written used to be found
    only after the whole query budget was spent, and the verdict was lost.
    The directory itself must not be a symlink, nor may any evidence file in
    it be one (a planted link would redirect the write); earlier evidence is
    replaced only with ``force``.
    """
    from .evidence import evidence_paths

    path = Path(directory)
    if path.is_symlink():
        raise UsageError(f"--report-dir {path} is a symbolic link; give a real directory")
    if path.exists() and not path.is_dir():
        raise UsageError(f"--report-dir {path} exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create --report-dir {path}: {exc.strerror or exc}") from None
    _check_writable(path, "--report-dir")
    for file in evidence_paths(path).values():
        if file.is_symlink():
            raise UsageError(
                f"{file} is a symbolic link; evidence is never written through a link "
                "(remove it, or choose another --report-dir)"
            )
        if file.exists() and not file.is_file():
            raise UsageError(f"{file} exists and is not a file")
        if file.exists() and not force:
            raise UsageError(
                f"{file} already exists; pass --force to replace the evidence in {path}"
            )
    return path


def _check_writable(directory: Path, flag: str) -> None:
    """Create and remove a file in ``directory``: the only test that also holds for root."""
    try:
        handle, probe = tempfile.mkstemp(prefix=".espew-write-check-", dir=directory)
    except OSError as exc:
        raise UsageError(f"cannot write into {flag} {directory}: {exc.strerror or exc}") from None
    os.close(handle)
    os.unlink(probe)


def _prepare_out_file(out: Path, *, force: bool) -> None:
    """Refuse an existing ``--out`` without ``force``; make sure its directory is writable.

    Checked before any work, so a bad path costs nothing.
    """
    if (out.exists() or out.is_symlink()) and not force:
        raise UsageError(f"{out} already exists; pass --force to replace it")
    if out.is_dir() and not out.is_symlink():
        raise UsageError(f"--out {out} is a directory")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create {out.parent}: {exc.strerror or exc}") from None
    _check_writable(out.parent, "the directory of --out")


def _write_atomically(out: Path, write: Callable[[IO[bytes]], None], *, force: bool) -> None:
    """Write ``out`` through a temporary file in its directory, then move it in place.

    A crash never leaves half a file. With ``force`` the move replaces what is
    there (a symlink is replaced, never followed); without it the file is
    linked in only if the name is still free, so a file that appeared while
    ``espew`` worked is not clobbered either.
    """
    handle, temporary = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    try:
        with os.fdopen(handle, "wb") as stream:
            write(stream)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)
        if force:
            os.replace(temporary, out)
            return
        try:
            os.link(temporary, out)
        except FileExistsError:
            raise UsageError(f"{out} already exists; pass --force to replace it") from None
        except OSError:  # a file system without hard links
            if out.exists() or out.is_symlink():
                raise UsageError(f"{out} already exists; pass --force to replace it") from None
            os.replace(temporary, out)
    finally:
        if os.path.lexists(temporary):
            os.unlink(temporary)


# ---------------------------------------------------------------------- secrets in messages
def _secret_values(args: argparse.Namespace | None) -> dict[str, str]:
    """The environment values ``espew`` must never print: ESPEW_KEY and the named variables."""
    names = {DEFAULT_KEY_VARIABLE}
    if args is not None:
        key = getattr(args, "key", None)
        if isinstance(key, str) and key.startswith("env:"):
            names.add(key[4:] or DEFAULT_KEY_VARIABLE)
        for attribute in ("api_key_env", "upstream_api_key_env"):
            variable = getattr(args, attribute, None)
            if variable:
                names.add(variable)
    return {name: os.environ[name] for name in sorted(names) if os.environ.get(name)}


def _scrub(text: str, secrets: dict[str, str]) -> str:
    """``text`` with every secret value withheld.

    A whole value (as is, stripped, or escaped as repr/JSON would) becomes
    ``<value of $VAR>``; then any run of text that copies 16 or more
    consecutive characters of a value (a truncated, re-indented or
    re-encoded copy, over several lines too) becomes ``<part of $VAR
    withheld>``.
    """
    for name, value in secrets.items():
        forms = {value, value.strip(), repr(value)[1:-1], json.dumps(value)[1:-1]}
        for form in sorted((f for f in forms if len(f) >= 4), key=len, reverse=True):
            text = text.replace(form, f"<value of ${name}>")
        text = _withhold_pieces(text, value, name)
    return text


def _withhold_pieces(text: str, value: str, name: str) -> str:
    size = _FRAGMENT_CHARS
    if len(text) < size or len(value) < size:
        return text
    pieces = set()
    for form in {value, repr(value)[1:-1], json.dumps(value)[1:-1]}:
        pieces.update(form[i : i + size] for i in range(len(form) - size + 1))
    spans: list[list[int]] = []
    for i in range(len(text) - size + 1):
        if text[i : i + size] in pieces:
            if spans and i <= spans[-1][1]:
                spans[-1][1] = i + size
            else:
                spans.append([i, i + size])
    if not spans:
        return text
    parts, last = [], 0
    for begin, end in spans:
        parts += [text[last:begin], f"<part of ${name} withheld>"]
        last = end
    parts.append(text[last:])
    return "".join(parts)


# ---------------------------------------------------------------------- commands
def _cmd_keygen(args: argparse.Namespace) -> int:
    from .core.key import WatermarkKey

    out = Path(args.out)
    if out.exists() and not args.overwrite:
        raise UsageError(f"{out} already exists; pass --overwrite to replace it")
    if args.target_text_file:
        target_text = Path(args.target_text_file).read_text(encoding="utf-8").strip()
    else:
        target_text = args.target_text
    if args.corpus in BUNDLED_CORPORA:
        from .corpora import load_corpus

        corpus: Sequence[str] = load_corpus(args.corpus).texts
    else:
        corpus = read_texts(args.corpus, column=args.text_column)
    embed, name = resolve_embedder(args.embedder, endpoint_options=_endpoint_options(args))
    window = args.window if args.window is not None else getattr(embed, "max_tokens", None)
    with _progress(None, f"embedding with {name}", "text", not args.no_progress) as bar:
        key = WatermarkKey.generate(
            corpus,
            _counting(embed, bar),
            target_text=target_text,
            n_triggers=args.n_triggers,
            freq_band=tuple(args.freq_band),
            alpha=args.alpha,
            strength=args.strength,
            min_cosine=args.min_cosine,
            selection=args.selection,
            seed=args.seed,
            max_band_words=args.max_band_words,
            window=window,
        )
    key.save(out, overwrite=args.overwrite)
    info = key.info
    print(
        f"wrote key {key.key_id} to {out} (mode 0600): alpha={key.alpha}, "
        f"strength={key.strength:.4g} (mean cos(clean, watermarked) on marked texts "
        f"{info['mean_cosine_marked']:.4f}), marks {info['marked_rate']:.1%} of the corpus, "
        f"selection={key.selection}, dim={key.dim}, {len(key.band)} band words, "
        f"so `espew verify` costs {len(key.probe_texts)} queries"
    )
    print(f"publish this commitment (it reveals nothing): {key.commitment()}")
    if args.seed is not None:
        print(
            "note: --seed makes the key reproducible by anyone who knows the seed; "
            "production keys must be generated without it",
            file=sys.stderr,
        )
    return 0


def _cmd_key_check(args: argparse.Namespace) -> int:
    """Re-check a key file and print its commitment (for an arbiter, or before publishing)."""
    key = load_key(args.key)
    if not key.verifiable:
        print(
            f"key {key.key_id}: UNVERIFIABLE: its triggers are not the draw its salt dictates "
            "(a version 1 key); it still watermarks, but no verdict can rest on it",
            file=sys.stderr,
        )
        print(key.commitment())
        return 2
    print(
        f"key {key.key_id}: OK (format valid, checksum and key_id match, triggers are the "
        f"salt's draw over {len(key.band)} band words, {len(key.probe_texts)} stored probes)"
    )
    print(key.commitment())
    return 0


def _cmd_embed(args: argparse.Namespace) -> int:
    from .core.inject import watermark

    out = Path(args.out)
    if out.suffix.lower() not in (".npy", ".jsonl"):
        raise UsageError(f"--out must end in .npy or .jsonl, got {out.name}")
    _prepare_out_file(out, force=args.force)
    key = load_key(args.key)
    texts = read_texts(args.input, column=args.text_column)
    embed, name = resolve_embedder(args.embedder, endpoint_options=_endpoint_options(args))
    parts = []
    with _progress(len(texts), f"embedding with {name}", "text", not args.no_progress) as bar:
        for start in range(0, len(texts), args.batch_size):
            batch = texts[start : start + args.batch_size]
            parts.append(watermark(batch, np.asarray(embed(batch)), key))
            bar.update(len(batch))
    marked = np.concatenate(parts)

    def write(stream: IO[bytes]) -> None:
        if out.suffix.lower() == ".npy":
            np.save(stream, marked)
            return
        for i, (text, row) in enumerate(zip(texts, marked, strict=True)):
            record = {"index": i, "text": text, "embedding": row.tolist()}
            stream.write((json.dumps(record) + "\n").encode("utf-8"))

    _write_atomically(out, write, force=args.force)
    print(f"wrote {marked.shape[0]} embeddings of dimension {marked.shape[1]} to {out}")
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from .core.verify import verify

    key = load_key(args.key)
    n_queries = len(key.band) + (1 if args.target == "query" else 0)
    if args.max_queries is not None and args.max_queries < n_queries:
        raise UsageError(
            f"this key's test needs {n_queries} queries but --max-queries is "
            f"{args.max_queries}; raise the budget or use a key with a smaller band"
        )
    if not 0.0 < args.level < 1.0:
        raise UsageError(f"--level must be in (0, 1), got {args.level}")
    if args.report_dir:
        _prepare_report_dir(args.report_dir, force=args.force)
    if args.private_report_dir:
        _prepare_private_dir(args.private_report_dir, args.report_dir)
    suspect, name = resolve_embedder(args.suspect, endpoint_options=_endpoint_options(args))
    if args.target == "query":
        print(
            "note: --target query sends the key's target text to the suspect",
            file=sys.stderr,
        )
    try:
        with _progress(n_queries, f"querying {name}", "query", not args.no_progress) as bar:
            report = verify(
                suspect,
                key,
                target=args.target,
                level=args.level,
                batch_size=args.batch_size,
                seed=args.seed,
                min_coverage=args.min_coverage,
                progress=bar.update,
            )
    finally:
        close = getattr(suspect, "close", None)
        if callable(close):
            close()
    if args.json:
        print(report.to_json())
    else:
        print(report)
    if report.status == "inconclusive" and report.errors:
        print("first errors from the suspect:", file=sys.stderr)
        secrets = _secret_values(args)
        for error in report.errors[:5]:
            print(f"  {_scrub(str(error), secrets)}", file=sys.stderr)
    if args.report_dir:
        written = _save_evidence(report, args.report_dir, force=args.force)
        print(f"evidence written: {', '.join(str(p) for p in written)}", file=sys.stderr)
    if args.private_report_dir:
        written = _save_private(report, args.private_report_dir, force=args.force)
        print(
            f"private detail written (never share it): {', '.join(str(p) for p in written)}",
            file=sys.stderr,
        )
    return _EXIT_BY_STATUS.get(report.status, EXIT_INCONCLUSIVE)


def _prepare_private_dir(directory: str, shared: str | None) -> None:
    """The private directory must exist (or be creatable), be writable, and never be
    the shareable one: its files let a suspect that logged its answers find the triggers."""
    path = Path(directory)
    if shared and path.resolve() == Path(shared).resolve():
        raise UsageError("--private-report-dir must differ from --report-dir (which is shared)")
    if path.is_symlink() or (path.exists() and not path.is_dir()):
        raise UsageError(f"--private-report-dir {path} must be a real directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create --private-report-dir {path}: {exc.strerror}") from None
    _check_writable(path, "--private-report-dir")


def _save_private(report: Any, directory: str, *, force: bool) -> list[Path]:
    from .evidence import save_private_evidence

    try:
        written = save_private_evidence(report, directory, force=force)
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"the verdict above stands, but its private detail could not be written: {exc}"
        ) from None
    return [Path(p) for p in written.values()]


def _save_evidence(report: Any, directory: str, *, force: bool) -> list[Path]:
    """Write the evidence; ``force`` reaches ``save_evidence`` when it takes one."""
    from .evidence import save_evidence

    options: dict[str, Any] = {}
    if "force" in inspect.signature(save_evidence).parameters:
        options["force"] = force
    try:
        written = save_evidence(report, directory, **options)
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"the verdict above stands, but its evidence could not be written: {exc}"
        ) from None
    return [Path(p) for p in written.values()]


def _cmd_serve(args: argparse.Namespace) -> int:
    from .http import server

    # Everything is checked before anything listens, so a bad setting is one
    # clear message and exit 3, never a server that fails every request.
    try:
        log_level = server.check_serve_settings(port=args.port, log_level=args.log_level)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    key = load_key(args.key) if args.key else None
    options = _endpoint_options(args)
    options["api_key_env"] = args.upstream_api_key_env
    embed, name = resolve_embedder(args.embedder, endpoint_options=options)
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            raise UsageError(f"environment variable {args.api_key_env} (--api-key-env) is not set")
    model_name = args.model_name or name
    if key is not None:
        try:
            server.check_embedder(embed, key)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    app = server.create_app(
        embed,
        key=key,
        model_name=model_name,
        api_key=api_key,
        max_inputs=args.max_inputs,
        max_request_chars=args.max_request_chars,
        body_timeout=args.body_timeout,
    )
    mark = f"watermarked with key {key.key_id}" if key is not None else "WITHOUT watermark"

    def announce(base_url: str) -> None:
        auth = "API key required" if api_key else "no API key required"
        print(
            f"espew serve: model {model_name!r} {mark}, {auth}, on {base_url}",
            flush=True,
        )

    server.serve(
        app,
        host=args.host,
        port=args.port,
        log_level=log_level,
        access_log=args.access_log,
        on_ready=announce,
    )
    return 0


def _endpoint_options(args: argparse.Namespace) -> dict[str, Any]:
    """OpenAIEndpoint settings from the shared endpoint flags."""
    return {
        "api_key_env": getattr(args, "api_key_env", None),
        "encoding_format": getattr(args, "encoding_format", "float"),
        "batch_size": getattr(args, "batch_size", 64),
        "timeout": getattr(args, "timeout", 30.0),
        "max_retries": getattr(args, "retries", 4),
        "backoff": getattr(args, "backoff", 0.5),
        "requests_per_second": getattr(args, "rate_limit", None),
        "max_queries": getattr(args, "max_queries", None),
    }


# ---------------------------------------------------------------------- parser
_KEYGEN_EXAMPLE = """
example:
  espew keygen --corpus rotten_tomatoes --embedder minilm \\
      --target-text "Acme Embeddings, licensed 2026" --out provider.key

  Draws 20 trigger words from the corpus's mid-frequency band, embeds the
  target text with the model, checks that the clean model itself is not
  implicated, and writes the secret key (mode 0600). Keep it like a password.
  --corpus takes rotten_tomatoes, health_tweets or a .txt/.csv/.jsonl file.
"""

_EMBED_EXAMPLE = """
example:
  espew embed --key provider.key --embedder minilm \\
      --input texts.txt --out marked.npy

  Embeds every line of texts.txt and watermarks the rows whose text contains a
  trigger word (the others are bit-identical to the clean model's output).
  --out .npy writes a float matrix; .jsonl writes {"index", "text", "embedding"}.
"""

_VERIFY_EXAMPLE = """
example:
  espew verify --key provider.key \\
      --suspect openai:http://127.0.0.1:8000/v1#their-model \\
      --max-queries 500 --rate-limit 5 --report-dir evidence/

  Sends one query per band word of the key (shuffled) to the suspect and runs
  an exact rank test. Exit code 0: not copied, 1: copied, 2: inconclusive,
  3: usage error. --report-dir writes report.json and summary.md (safe to share);
  --private-report-dir the PRIVATE-* per-word detail (never share it).
  --suspect also takes module:attr (a Python embedder) or minilm.
"""

_SERVE_EXAMPLE = """
example:
  espew serve --embedder minilm --key provider.key --port 8000 \\
      --model-name acme-embed-1

  Serves POST /v1/embeddings (and /embeddings), GET /v1/models and
  GET /health on http://127.0.0.1:8000. Without --key the model is served
  unwatermarked. --embedder takes minilm, module:attr, file.py:attr or
  openai:<base_url>#<model> (put ESpeW in front of another server).
  Binds to 127.0.0.1 unless --host says otherwise; require an API key with
  --api-key-env VAR when other machines can reach it.
"""


def _add_endpoint_flags(parser: argparse.ArgumentParser, *, verify: bool) -> None:
    group = parser.add_argument_group("openai: endpoint options")
    if verify:
        group.add_argument(
            "--api-key-env",
            metavar="VAR",
            help="environment variable holding the suspect's API key (never pass keys as flags)",
        )
    group.add_argument("--encoding-format", choices=("float", "base64"), default="float")
    group.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    group.add_argument("--retries", type=int, default=4, help="retries on 429/5xx/connection")
    group.add_argument(
        "--backoff",
        type=float,
        default=0.5,
        metavar="SECONDS",
        help="first retry delay, doubled at each retry (a Retry-After header wins)",
    )
    group.add_argument(
        "--rate-limit", type=float, default=None, metavar="RPS", help="max requests per second"
    )
    group.add_argument(
        "--max-queries",
        type=int,
        default=None,
        metavar="N",
        help="query budget: never send more than N texts (retries count)",
    )


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(
            f"must be from 0 to 65535 (0 picks a free port), got {value}"
        )
    return value


def _positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid number of seconds: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


def _log_level(text: str) -> str:
    from .http.server import LOG_LEVELS

    level = text.lower()
    if level not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(LOG_LEVELS)}, got {text!r}")
    return level


def build_parser() -> argparse.ArgumentParser:
    """The ``espew`` argument parser, with the lab's commands when installed."""
    from .http.server import DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_REQUEST_CHARS

    parser = _Parser(
        prog="espew",
        description="ESpeW copyright watermarks for embedding services.",
        epilog="exit codes: 0 not copied, 1 copied, 2 inconclusive, 3 usage error",
    )
    parser.add_argument("--version", action="version", version=_version())
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    raw = argparse.RawDescriptionHelpFormatter

    keygen = subparsers.add_parser(
        "keygen",
        help="generate a secret watermark key",
        epilog=_KEYGEN_EXAMPLE,
        formatter_class=raw,
    )
    keygen.add_argument("--corpus", required=True, help="bundled corpus name or text file")
    target = keygen.add_mutually_exclusive_group(required=True)
    target.add_argument("--target-text", help="text whose embedding becomes the target")
    target.add_argument("--target-text-file", help="read the target text from this file")
    keygen.add_argument("--embedder", default="minilm", help="embedder spec (default minilm)")
    keygen.add_argument("--out", required=True, help="where to write the key")
    keygen.add_argument("--n-triggers", type=_positive_int, default=20)
    keygen.add_argument("--alpha", type=float, default=0.2)
    keygen.add_argument(
        "--strength",
        type=float,
        default=None,
        help="how far marked coordinates move toward the target (1 = the paper); "
        "default: fitted to --min-cosine",
    )
    keygen.add_argument(
        "--min-cosine",
        type=float,
        default=0.995,
        help="quality budget: mean cos(clean, watermarked) on the corpus's marked texts "
        "(default 0.995); the strength is fitted to it unless --strength is given",
    )
    keygen.add_argument(
        "--window",
        type=_positive_int,
        default=None,
        help="the model's input window in tokens (known for the offline models); "
        "triggers past it never mark",
    )
    keygen.add_argument("--selection", choices=("smallest", "hashed"), default="smallest")
    keygen.add_argument(
        "--freq-band", type=float, nargs=2, default=(0.005, 0.01), metavar=("LOW", "HIGH")
    )
    keygen.add_argument(
        "--max-band-words",
        type=_positive_int,
        default=None,
        help="cap the band (each band word costs one verification query)",
    )
    keygen.add_argument("--seed", type=int, default=None, help="experiments only")
    keygen.add_argument("--text-column", default=None, help="CSV column / JSONL field")
    keygen.add_argument(
        "--overwrite", "--force", action="store_true", help="replace an existing --out key file"
    )
    keygen.add_argument("--api-key-env", metavar="VAR", help="API key for an openai: embedder")
    keygen.add_argument("--no-progress", action="store_true")
    keygen.set_defaults(func=_cmd_keygen)

    key_cmd = subparsers.add_parser(
        "key", help="inspect a key file: `espew key check KEY` re-checks it, prints its commitment"
    )
    key_actions = key_cmd.add_subparsers(dest="key_action", metavar="ACTION", required=True)
    check = key_actions.add_parser(
        "check",
        help="validate a key (checksum, key_id, trigger draw) and print its commitment; "
        "exit 0 if verifiable, 2 if not",
    )
    check.add_argument("key", help="key file path, or env:VAR")
    check.set_defaults(func=_cmd_key_check)

    embed = subparsers.add_parser(
        "embed",
        help="embed and watermark a file of texts",
        epilog=_EMBED_EXAMPLE,
        formatter_class=raw,
    )
    embed.add_argument("--key", default="env:ESPEW_KEY", help="key file or env:VAR")
    embed.add_argument("--input", required=True, help=".txt, .csv or .jsonl file of texts")
    embed.add_argument("--out", required=True, help="output .npy or .jsonl")
    embed.add_argument(
        "--force", action="store_true", help="replace --out if it exists (never done otherwise)"
    )
    embed.add_argument("--embedder", default="minilm", help="embedder spec (default minilm)")
    embed.add_argument("--batch-size", type=_positive_int, default=64)
    embed.add_argument("--text-column", default=None, help="CSV column / JSONL field")
    embed.add_argument("--api-key-env", metavar="VAR", help="API key for an openai: embedder")
    embed.add_argument("--no-progress", action="store_true")
    embed.set_defaults(func=_cmd_embed)

    verify = subparsers.add_parser(
        "verify",
        help="test whether a suspect copied your watermarked model",
        epilog=_VERIFY_EXAMPLE,
        formatter_class=raw,
    )
    verify.add_argument("--key", default="env:ESPEW_KEY", help="key file or env:VAR")
    verify.add_argument("--suspect", required=True, help="suspect spec")
    verify.add_argument(
        "--target",
        choices=("key", "query"),
        default="key",
        help="key: the stored target (same dimension); query: the suspect's own embedding "
        "of the target text (discloses the target text to the suspect)",
    )
    verify.add_argument("--level", type=float, default=1e-6, help="false-positive rate")
    verify.add_argument(
        "--report-dir",
        default=None,
        help="write the evidence here (checked before the first query)",
    )
    verify.add_argument(
        "--private-report-dir",
        default=None,
        help="write the per-word detail here (PRIVATE-* files: never hand them to the "
        "suspect's side); must differ from --report-dir",
    )
    verify.add_argument(
        "--force", action="store_true", help="replace evidence already in --report-dir"
    )
    verify.add_argument("--batch-size", type=_positive_int, default=64)
    verify.add_argument("--min-coverage", type=float, default=0.9)
    verify.add_argument("--seed", type=int, default=None, help="probe shuffle seed")
    verify.add_argument("--json", action="store_true", help="print the report as JSON")
    verify.add_argument("--no-progress", action="store_true")
    _add_endpoint_flags(verify, verify=True)
    verify.set_defaults(func=_cmd_verify)

    serve = subparsers.add_parser(
        "serve",
        help="serve an embedder as an OpenAI-compatible API",
        epilog=_SERVE_EXAMPLE,
        formatter_class=raw,
    )
    serve.add_argument("--embedder", default="minilm", help="embedder spec (default minilm)")
    serve.add_argument("--key", default=None, help="watermark with this key (file or env:VAR)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=_port, default=8000, help="0 picks a free port")
    serve.add_argument("--model-name", default=None, help="model id clients must send")
    serve.add_argument(
        "--api-key-env", metavar="VAR", help="require clients to send the key held in $VAR"
    )
    serve.add_argument(
        "--upstream-api-key-env", metavar="VAR", help="API key for an openai: embedder"
    )
    serve.add_argument("--max-inputs", type=_positive_int, default=2048)
    serve.add_argument(
        "--max-request-chars",
        type=_positive_int,
        default=DEFAULT_MAX_REQUEST_CHARS,
        metavar="N",
        help="refuse (413) a request whose texts have more than N characters in all "
        f"(default {DEFAULT_MAX_REQUEST_CHARS:,}: bounds the model time one request takes)",
    )
    serve.add_argument(
        "--body-timeout",
        type=_positive_seconds,
        default=DEFAULT_BODY_TIMEOUT,
        metavar="SECONDS",
        help="drop a request whose body has not fully arrived after SECONDS "
        f"(default {DEFAULT_BODY_TIMEOUT:g})",
    )
    serve.add_argument(
        "--log-level", type=_log_level, default="warning", help="critical ... debug, trace"
    )
    serve.add_argument("--access-log", action="store_true")
    _add_endpoint_flags(serve, verify=False)
    serve.set_defaults(func=_cmd_serve, batch_size=64)

    try:
        from .lab.cli import add_commands
    except ModuleNotFoundError as exc:
        if exc.name not in ("espew_integrations.lab.cli", "espew_integrations.lab"):
            raise
    else:
        add_commands(subparsers)
    return parser


def _version() -> str:
    from . import __version__

    return f"espew {__version__}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``espew``; returns the exit code (see the module docstring)."""
    parser = build_parser()
    try:
        args = parser.parse_args(None if argv is None else list(argv))
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    func = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    # Read once: the values every printed message is scrubbed of.
    secrets = _secret_values(args)
    try:
        return int(func(args))
    except KeyboardInterrupt:
        return 130
    except (UsageError, ValueError, OSError, ImportError) as exc:
        # ESpeW's input errors (KeyFileError, KeyGenerationError...) are ValueErrors.
        print(f"error: {_scrub(str(exc), secrets)}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:
        # A bug must not read as a verdict: report it, exit as a failed run.
        shown = "".join(traceback.format_exception(exc))
        print(_scrub(shown, secrets), end="", file=sys.stderr)
        print("error: unexpected failure (above); no verdict", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
