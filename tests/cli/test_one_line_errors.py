"""Every command refuses in one line with a non-zero exit and no traceback: argparse's own refusals (an invalid
choice, a port out of range) without the usage block, and `serve` on a port another process holds, refused before
any model loads. `--help` still prints the usage."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from playground.__main__ import main

REPO_ROOT = Path(__file__).resolve().parents[2]


def refused(capsys: pytest.CaptureFixture, *argv: str) -> str:
    """The one stderr line `python -m playground ARGV` refuses with (through the same main(), in process)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as stopped:
        main(list(argv))
    out = capsys.readouterr()
    assert stopped.value.code == 2
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), out.err
    assert out.out == "" and "usage:" not in out.err
    return lines[0]


@pytest.mark.parametrize(("argv", "words"), [
    (("generate", "--chat-template", "chatml"), "invalid choice: 'chatml'"),
    (("bench", "--profile", "nope"), "invalid choice: 'nope'"),
    (("space", "build", "--hardware", "tpu", "--out", "x"), "invalid choice: 'tpu'"),
    (("serve", "--port", "99999"), "a port from 0 to 65535"),
    (("serve", "--port", "http"), "a port from 0 to 65535"),
    (("vllm-command", "--port", "-1"), "a port from 0 to 65535"),
    (("serve", "--k", "four"), "a whole number from 1 to 16 or auto"),
    (("space", "build", "--hardware", "cpu"), "required: --out"),
    (("no-such-command",), "invalid choice: 'no-such-command'"),
    ((), "required: command"),
])
def test_argparse_refusals_are_one_line(capsys: pytest.CaptureFixture, argv: tuple[str, ...], words: str) -> None:
    line = refused(capsys, *argv)
    assert words in line, line


def test_help_keeps_its_usage(capsys: pytest.CaptureFixture) -> None:
    for argv in (["--help"], ["bench", "--help"], ["space", "build", "--help"]):
        capsys.readouterr()
        with pytest.raises(SystemExit) as stopped:
            main(argv)
        out = capsys.readouterr().out
        assert stopped.value.code == 0 and out.startswith("usage: ") and "--help" in out, argv


def test_serve_on_a_busy_port_is_refused_in_one_line_before_any_model_loads(tmp_path: Path) -> None:
    """A real process, on a port this test holds: one `error:` line naming the port, exit 2, no traceback. The
    models folder is empty, so a server that loaded its model first would fail on the model instead."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        busy = holder.getsockname()[1]
        env = {**os.environ, "PLAYGROUND_MODELS_DIR": str(tmp_path), "HF_HUB_OFFLINE": "1",
               "PYTHONPATH": str(REPO_ROOT)}
        done = subprocess.run([sys.executable, "-m", "playground", "serve", "--port", str(busy)], cwd=REPO_ROOT,
                              env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines() == [f"error: cannot listen on 127.0.0.1:{busy}: the port is in use "
                                                "(another server holds it)"]
    assert done.stdout == ""
