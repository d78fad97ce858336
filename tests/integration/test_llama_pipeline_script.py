"""The LlamaIndex page's two-worker pipeline runs as a saved script, offline (issue 55).

A RAG builder saves the page's pipeline as ``pipeline.py`` and runs ``python
pipeline.py``: spawned workers import that file again and unpickle the splitter and
the wrapper. Run with ``python -c`` (as the page runner does) none of that happens, so
this test writes the block to a file and runs it as a reader would, in a process of
its own with every network address refused: a worker that tries to download a
tokenizer dies, and the pool then waits forever, which the deadline turns into a
failure instead of a hung suite.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.support import REPO

PAGE = REPO / "docs" / "frameworks" / "llama-index.md"
DEADLINE_S = 300
# Every HTTP(S) request through a proxy that refuses: offline, without touching the host.
OFFLINE = {
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "no_proxy": "",
    "NO_PROXY": "",
    "HF_HUB_OFFLINE": "1",
}


def page_script() -> str:
    """The page's pipeline block: the one with worker processes and a main guard."""
    text = PAGE.read_text(encoding="utf-8")
    blocks = text.split("```python\n")[1:]
    scripts = [b.split("```", 1)[0] for b in blocks if "num_workers=workers" in b]
    assert len(scripts) == 1, "the LlamaIndex page shows one pipeline script"
    script = scripts[0]
    assert 'if __name__ == "__main__":' in script and "SentenceSplitter(" in script
    assert "workers=2" in script
    return script


def run_offline(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``command`` in a new session with the network refused; the whole group is killed
    at the deadline (a hung pool's workers too)."""
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env |= OFFLINE | {"PYTHONPATH": str(REPO)}
    env.pop("TIKTOKEN_CACHE_DIR", None)  # as on a reader's machine
    process = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = process.communicate(timeout=DEADLINE_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        out, err = process.communicate()
        raise AssertionError(
            f"{command} did not finish in {DEADLINE_S} s (a worker pool waiting forever?)\n"
            f"{err[-3000:]}"
        ) from None
    return subprocess.CompletedProcess(command, process.returncode, out, err)


CHECK = """
import json
import numpy as np
from llama_index.core import Document
from espew_integrations import WatermarkKey, watermark
from espew_integrations.offline.corpora import rotten_tomatoes
from espew_integrations.offline.frameworks.llama_index import MiniLMEmbedding
import pipeline  # the page's script: its guard keeps the pipeline from running here

texts = list(rotten_tomatoes().subset(60, seed=2).texts)
documents = [Document(text=" ".join(texts[i:i + 12])) for i in range(0, 60, 12)]
one = pipeline.ingest(documents, workers=1)
chunks = list(one)
clean = MiniLMEmbedding().get_text_embedding_batch(chunks)
expected = watermark(chunks, clean, WatermarkKey.load("provider.key"))
json.dump({"chunks": len(chunks), "gap": float(np.max(np.abs(np.array([one[c] for c in chunks])
          - np.asarray(expected)))), "moved": float(np.max(np.abs(np.asarray(expected)
          - np.asarray(clean))))}, open("check.json", "w"))
"""


def test_the_pages_two_worker_pipeline_saved_as_a_script_gives_the_one_worker_vectors(
    key, tmp_path
):
    key.save(tmp_path / "provider.key")
    (tmp_path / "pipeline.py").write_text(page_script(), encoding="utf-8")
    done = run_offline([sys.executable, "pipeline.py"], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = [x for x in done.stdout.splitlines() if "chunks" in x]
    documents, chunks = int(line.split()[0]), int(line.split()[2])
    assert chunks > documents, line  # the splitter did split
    assert line.endswith("two workers give one worker's vectors: True"), line
    assert f"It prints `{line}`" in PAGE.read_text(encoding="utf-8"), line

    # The one-worker vectors are the core's watermark of the clean model's, chunk by chunk.
    (tmp_path / "check.py").write_text(CHECK, encoding="utf-8")
    checked = run_offline([sys.executable, "check.py"], tmp_path)
    assert checked.returncode == 0, checked.stderr[-3000:]
    result = json.loads((tmp_path / "check.json").read_text())
    assert result["chunks"] == chunks
    assert result["gap"] == 0.0 and result["moved"] > 0.0, result
    assert np.isfinite(result["moved"])
