"""A local RFC 3161 timestamp authority for tests: ``openssl ts -reply`` behind http.server.

A throwaway CA and a TSA certificate it signs (extended key usage timeStamping) are
made in a temporary folder with the ``openssl`` command; each POSTed request is
answered by ``openssl ts -reply``, as a real TSA answers. Tests that need it skip
only where the ``openssl`` command is absent (it is present on every CI image).
"""

from __future__ import annotations

import contextlib
import http.server
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

OPENSSL = shutil.which("openssl")

_TSA_CONFIG = """
[ tsa ]
default_tsa = local_tsa
[ local_tsa ]
dir = {folder}
serial = $dir/serial
crypto_device = builtin
signer_cert = $dir/tsa.crt
signer_key = $dir/tsa.key
signer_digest = sha256
default_policy = 1.2.3.4.1
digests = sha256
accuracy = secs:1
ordering = no
tsa_name = yes
ess_cert_id_chain = no
ess_cert_id_alg = sha256
"""


def _openssl(*argv: str, cwd: Path, stdin: bytes | None = None) -> bytes:
    done = subprocess.run(
        [str(OPENSSL), *argv], cwd=cwd, input=stdin, capture_output=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"openssl {argv[0]} failed: {done.stderr.decode(errors='replace')}")
    return done.stdout


def make_authority(folder: Path, name: str = "Local Test TSA") -> Path:
    """A CA and a TSA certificate in ``folder``; returns the CA certificate's path."""
    folder.mkdir(parents=True, exist_ok=True)
    new_key = ["-newkey", "rsa:2048", "-nodes", "-days", "2"]
    _openssl("req", "-x509", *new_key, "-keyout", "ca.key", "-out", "ca.crt",
             "-subj", f"/CN={name} Root", cwd=folder)  # fmt: skip
    _openssl("req", "-new", *new_key[:3], "-keyout", "tsa.key", "-out", "tsa.csr",
             "-subj", f"/CN={name}", cwd=folder)  # fmt: skip
    (folder / "ext.cnf").write_text(
        "extendedKeyUsage=critical,timeStamping\nkeyUsage=critical,digitalSignature\n"
    )
    _openssl("x509", "-req", "-in", "tsa.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
             "-CAcreateserial", "-out", "tsa.crt", "-days", "2", "-extfile", "ext.cnf",
             cwd=folder)  # fmt: skip
    (folder / "serial").write_text("01\n")
    (folder / "tsa.cnf").write_text(_TSA_CONFIG.format(folder=folder))
    return folder / "ca.crt"


@contextlib.contextmanager
def local_tsa(folder: Path | None = None) -> Iterator[tuple[str, Path]]:
    """Run a TSA on 127.0.0.1; yields ``(its URL, its CA certificate)``; stops it after."""
    with contextlib.ExitStack() as stack:
        if folder is None:
            folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="espew-tsa-")))
        ca = make_authority(folder)
        lock = threading.Lock()
        requests: list[bytes] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                query = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with lock:  # one serial file: one reply at a time
                    requests.append(query)
                    (folder / "query.tsq").write_bytes(query)
                    reply = _openssl("ts", "-reply", "-config", "tsa.cnf", "-queryfile",
                                     "query.tsq", cwd=folder)  # fmt: skip
                self.send_response(200)
                self.send_header("Content-Type", "application/timestamp-reply")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: object) -> None:
                return None

        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}/tsr", ca
        finally:
            server.shutdown()
            server.server_close()
