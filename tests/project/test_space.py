"""Space folders (`python -m playground space build`): each kind passes the Hub's rules for a push, carries only what
its hardware uses, and the CPU one, installed from its own requirements alone in a fresh virtual environment and
started as a Space starts it, answers a chat on the measured pair."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from playground.space import HARDWARE, build

ROOT = Path(__file__).resolve().parents[2]
HUB_LIMIT = 10 * 1000 * 1000  # the Hub's limit for a file outside LFS/Xet in a git push: 10 MB (decimal, the stricter)
COLORS = {"red", "yellow", "green", "blue", "indigo", "purple", "pink", "gray"}
SPACE_HARDWARE = {"cpu-basic", "cpu-upgrade", "zero-a10g", "t4-small", "t4-medium", "l4x1", "l4x4", "l40sx1",
                  "a10g-small", "a10g-large", "a100-large"}


def lfs_patterns(folder: Path) -> list[str]:
    attributes = folder / ".gitattributes"
    assert attributes.is_file(), "no .gitattributes"
    return [line.split()[0] for line in attributes.read_text().splitlines()
            if line.strip() and "filter=lfs" in line.split()[1:]]


def in_lfs(relative: str, patterns: list[str]) -> bool:
    """git's matching for the two forms used: `*.ext` (any folder) and `/path` (from the root)."""
    for pattern in patterns:
        if pattern.startswith("/") and relative == pattern[1:]:
            return True
        if "/" not in pattern and fnmatch.fnmatch(Path(relative).name, pattern):
            return True
    return False


def front_matter(folder: Path) -> dict:
    text = (folder / "README.md").read_text()
    assert text.startswith("---\n"), "README.md does not open with front matter"
    end = text.find("\n---\n", 4)
    assert end > 0
    return yaml.safe_load(text[4:end])


def gradio_pin() -> str:
    return next(line.split("==")[1].split()[0] for line in (ROOT / "requirements.txt").read_text().splitlines()
                if line.startswith("gradio=="))


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("spaces")
    return {hardware: build(hardware, root / hardware) for hardware in HARDWARE}


@pytest.mark.parametrize("hardware", HARDWARE)
def test_a_space_folder_passes_the_hubs_rules(folders: dict[str, Path], hardware: str) -> None:
    """No file over 10 MB and no binary file outside an LFS rule; front matter the Hub reads for that SDK; nothing a
    Space does not run (caches, the repository's tests)."""
    folder = folders[hardware]
    patterns = lfs_patterns(folder)
    for path in (p for p in folder.rglob("*") if p.is_file()):
        relative = path.relative_to(folder).as_posix()
        with path.open("rb") as f:
            binary = b"\0" in f.read(8192)
        if path.stat().st_size > HUB_LIMIT or binary:
            assert in_lfs(relative, patterns), f"{relative} ({path.stat().st_size} bytes) is outside LFS"
        assert "__pycache__" not in relative and not relative.startswith(("tests/", ".git/", ".venv/"))
    meta = front_matter(folder)
    for key in ("title", "emoji", "colorFrom", "colorTo", "sdk", "short_description", "license", "suggested_hardware"):
        assert meta.get(key), f"front matter lacks {key}"
    assert meta["colorFrom"] in COLORS and meta["colorTo"] in COLORS and len(meta["short_description"]) <= 60
    assert meta["suggested_hardware"] in SPACE_HARDWARE
    assert all(isinstance(m, str) and m.count("/") == 1 for m in meta["models"])
    if hardware == "docker":
        assert meta["sdk"] == "docker" and isinstance(meta["app_port"], int) and (folder / "Dockerfile").is_file()
        assert not (folder / "assets" / "models" / "kimi-tiny").exists()  # vLLM's image does not run it
    else:
        assert meta["sdk"] == "gradio" and str(meta["sdk_version"]) == gradio_pin()
        assert (folder / meta["app_file"]).is_file() and meta["python_version"] in {"3.10", "3.11", "3.12", "3.13"}
        assert (folder / "requirements.txt").is_file()
    assert (folder / "assets" / "smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf").is_file()  # the measured target
    assert (folder / "assets" / "models" / "smollm2-135m" / "eagle3.1" / "config.json").is_file()


def test_the_requirements_fit_the_hardware(folders: dict[str, Path]) -> None:
    cpu = (folders["cpu"] / "requirements.txt").read_text().splitlines()
    assert cpu[0].startswith("--extra-index-url https://download.pytorch.org/whl/cpu")
    assert any(line.startswith("torch==") and line.endswith("+cpu") for line in cpu)
    zerogpu = (folders["zerogpu"] / "requirements.txt").read_text().splitlines()
    assert "spaces" in zerogpu and not any("+cpu" in line or "whl/cpu" in line for line in zerogpu)
    assert any(line.startswith("gguf") for line in zerogpu)  # the Space converts the GGUF it carries


def test_build_refuses_a_folder_in_use(tmp_path: Path) -> None:
    (tmp_path / "something").write_text("x")
    with pytest.raises(ValueError, match="is not empty"):
        build("cpu", tmp_path)
    with pytest.raises(ValueError, match="unknown hardware"):
        build("tpu", tmp_path / "new")


@pytest.fixture(scope="module")
def space_python(folders: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment from the CPU Space's requirements.txt alone (about 2 minutes here). The line naming
    PyTorch's CPU index is dropped: this machine reaches only its own package mirror, which holds the same torch
    2.13.0+cpu wheel."""
    root = tmp_path_factory.mktemp("space-venv")
    requirements = root / "requirements.txt"
    requirements.write_text("".join(line + "\n" for line in (folders["cpu"] / "requirements.txt").read_text()
                                    .splitlines() if not line.startswith("--extra-index-url")))
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True)
    install = subprocess.run([str(root / "venv" / "bin" / "pip"), "install", "-q", "-r", str(requirements)],
                             capture_output=True, text=True, timeout=1500)
    assert install.returncode == 0, install.stderr[-3000:]
    return root / "venv" / "bin" / "python"


def run_space(python: Path, folder: Path, home: Path, prompt: str, max_new_tokens: int) -> tuple:
    """Start the folder's app.py as a Space starts it (its environment, port 7860 where free, an empty home) and
    return the last /chat outputs of one greedy EAGLE-3.1 chat through gradio_client (the chatbot second, the run
    record last)."""
    from gradio_client import Client

    port = 7860 if _port_free(7860) else free_port()  # Spaces use 7860; a test app may hold it here
    home.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "SYSTEM": "spaces", "SPACE_ID": "tests/eagle-playground",
           "GRADIO_SERVER_NAME": "0.0.0.0", "GRADIO_SERVER_PORT": str(port), "HF_HUB_OFFLINE": "1",
           "PYTHONUNBUFFERED": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    log_path = home / "space.log"
    with log_path.open("w") as log:
        app = subprocess.Popen([str(python), "app.py"], cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline, client = time.monotonic() + 600, None
            while client is None and time.monotonic() < deadline and app.poll() is None:
                try:
                    client = Client(f"http://127.0.0.1:{port}/", verbose=False)
                except Exception:
                    time.sleep(2)
            assert client is not None, f"the Space app did not come up: {log_path.read_text()[-3000:]}"
            job = client.submit(prompt, drafter="eagle3.1", k=4, k_auto=False, preset="smollm2-135m", temperature=0.0,
                                top_p=1.0,
                                max_new_tokens=max_new_tokens, chat_template="default", system="", seed="",
                                api_name="/chat")
            job.result(timeout=600)
            assert "answer" in _mcp_tools(f"http://127.0.0.1:{port}/gradio_api/mcp/")  # the Space serves MCP too
            return job.outputs()[-1]
        finally:
            app.terminate()
            app.wait(timeout=60)


PROMPT = "Write a Python function that returns the squares of a list of numbers."


def _mcp_tools(url: str) -> list[str]:
    """The tool names an MCP client (the `mcp` package's) lists at `url`."""
    import asyncio

    from mcp import Client

    async def names() -> list[str]:
        async with Client(url) as client:
            return [tool.name for tool in (await client.list_tools()).tools]
    return asyncio.run(names())


@pytest.mark.slow
def test_the_cpu_space_installs_alone_starts_as_a_space_and_answers_on_the_measured_pair(
        folders: dict[str, Path], space_python: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CPU Space folder as Spaces runs it: its requirements alone (space_python), app.py started with a Space's
    environment and an empty home, so the GGUF the folder carries is converted at first start; a greedy EAGLE-3.1
    chat through gradio_client comes with provenance (drafts accepted, step by step), and its tokens equal this
    repository's default pair's on the same prompt."""
    from playground.backends import open_backend
    from playground.engine import GenerationConfig
    from playground.presets import get_preset

    monkeypatch.delenv("PLAYGROUND_MODELS_DIR", raising=False)  # other tests point the default preset at tiny models

    outputs = run_space(space_python, folders["cpu"], tmp_path / "home", PROMPT, 48)
    run = outputs[-1]
    assert run["settings"]["drafter"] == "eagle3.1" and run["metrics"]["accepted_tokens"] > 0
    assert "tok-draft" in str(outputs[1])  # the answer marks the tokens that came from accepted drafts
    conversion = json.loads(next((tmp_path / "home" / ".cache" / "eagle-playground").glob("*/conversion.json"))
                            .read_text())
    assert conversion["source"].endswith("assets/smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")  # the carried file
    backend = open_backend(get_preset("smollm2-135m"))  # this repository's pair, not the shared (maybe tiny) one
    ids = backend.encode([{"role": "user", "content": PROMPT}])
    ours = [t for e in backend.stream(ids, "eagle3.1", GenerationConfig(max_new_tokens=48, k=4)) for t in e.emitted]
    assert run["token_ids"] == ours


@pytest.mark.slow
def test_the_zerogpu_space_starts_on_a_cpu_with_spaces_installed(folders: dict[str, Path], space_python: Path,
                                                                  tmp_path: Path) -> None:
    """The ZeroGPU folder as far as a CPU allows: its own requirements pin the CUDA torch, which this machine cannot
    install, so it runs in the CPU Space's environment plus the `spaces` package; without ZeroGPU (no
    SPACES_ZERO_GPU) its decorator is inert and the app answers on the CPU."""
    install = subprocess.run([str(space_python), "-m", "pip", "install", "-q", "spaces"], capture_output=True,
                             text=True, timeout=600)
    assert install.returncode == 0, install.stderr[-3000:]
    run = run_space(space_python, folders["zerogpu"], tmp_path / "home", PROMPT, 16)[-1]
    assert run["metrics"]["generated_tokens"] > 0 and run["settings"]["drafter"] == "eagle3.1"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.parametrize("hardware", HARDWARE)
def test_a_space_has_a_page_of_its_own(folders: dict[str, Path], hardware: str) -> None:
    """The Space's README says what runs on that hardware, with no local install or test steps, and its links point
    at files the folder carries."""
    text = (folders[hardware] / "README.md").read_text()
    body = text[text.find("\n---\n", 4) + 5:]
    assert "pip install" not in body and "pytest" not in body and "python3 -m venv" not in body
    assert ("vLLM is not installed here" in body) == (hardware != "docker")
    for link in re.findall(r"\]\(([^)#]+)", body):
        assert (folders[hardware] / link).exists(), link


def test_the_space_pages_benchmark_line_says_what_the_tab_offers(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Space README's Benchmark line against bench/public.py, which the tab reads: on a Space a profile is offered
    only where it was measured on this kind of machine and this preset within the bound (PLAYGROUND_PUBLIC_BENCH_S);
    on a machine the shipped durations do not name none is, each with why, and the tab points at the bench command."""
    from playground.bench.profiles import DURATIONS, measured_durations
    from playground.bench.public import BOUND_ENV, DEFAULT_BOUND_S, Machine, offered_profiles, public_note
    from playground.presets import DEFAULT
    from playground.space import space_readme

    monkeypatch.setenv("SPACE_ID", "someone/a-space")
    monkeypatch.delenv(BOUND_ENV, raising=False)
    for hardware in HARDWARE:
        line = " ".join(next(item for item in space_readme(hardware).split("\n- ")
                             if item.startswith("**Benchmark**")).split())
        assert BOUND_ENV in line and "assets/bench/durations.json" in line, line
        assert "the tab offers none" in line and "python -m playground bench --profile NAME" in line, line
        assert "the same CPU model, core count and vector units, and the same preset" in line, line
    elsewhere = Machine("A CPU no duration names", 2, "AVX2")
    assert offered_profiles(DEFAULT, machine=elsewhere) == []
    note = public_note(DEFAULT, machine=elsewhere)
    assert "Offered: none." in note and "python -m playground bench --profile NAME" in note
    measured = measured_durations(DURATIONS)
    assert measured, "no measured durations to hold the line against"
    for name, duration in measured.items():
        there = Machine(duration.cpu, duration.cores, duration.simd)
        assert (name in offered_profiles(duration.preset, machine=there)) == (duration.seconds <= DEFAULT_BOUND_S)
        assert name not in offered_profiles("kimi-tiny", machine=there)  # another preset: not measured on it
        assert name not in offered_profiles(duration.preset, machine=Machine(there.cpu, there.cores + 1, there.simd))
