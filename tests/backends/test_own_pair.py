"""A pair of one's own, checked from its configs before any weights are read (own_pair): each refusal is one
line, a public host refuses local folders, and a pair that fails to load leaves the others as they were."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest

from playground import own_pair
from playground.own_pair import PairRefused, PairShelf, check_pair
from playground.presets import get_preset


def refusal(target: str, **drafters: str) -> str:
    with pytest.raises(PairRefused) as refused:
        check_pair(target, {slot.replace("_", "."): path for slot, path in drafters.items()})
    message = str(refused.value)
    assert "\n" not in message
    return message


def copy_with_config(source: Path, folder: Path, **changes) -> Path:
    shutil.copytree(source, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **changes}))
    return folder


def test_a_fitting_pair_is_checked_from_its_configs(tiny_root: Path) -> None:
    check = check_pair(str(tiny_root / "target"), {"eagle3": str(tiny_root / "eagle3"),
                                                   "eagle3.1": str(tiny_root / "eagle3.1")})
    assert check.preset.name.startswith("own:target@") and set(check.preset.drafters) == {"eagle3", "eagle3.1"}
    one_drafter = check_pair(str(tiny_root / "target"), {"eagle3": str(tiny_root / "eagle3")})
    assert one_drafter.preset.name != check.preset.name  # another pair of the same target: another preset
    assert 0 < check.memory_bytes < 2**30


def test_each_refusal_is_one_line(tiny_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target, eagle3, eagle31 = (str(tiny_root / n) for n in ("target", "eagle3", "eagle3.1"))
    assert "name a target" in refusal("", eagle3=eagle3)
    assert "name an EAGLE-3 and/or an EAGLE-3.1 drafter" in refusal(target)
    # named in the wrong slot, either way (drafting.checkpoint_method reads the config's flags)
    assert "sets neither fc_norm nor norm_output: it is an EAGLE-3 drafter" in refusal(target, eagle3_1=eagle3)
    assert "sets fc_norm / norm_output: it is an EAGLE-3.1 drafter" in refusal(target, eagle3=eagle31)
    only_fc_norm = copy_with_config(tiny_root / "eagle3", tmp_path / "fc-norm-only", fc_norm=True)
    assert "it is an EAGLE-3.1 drafter" in refusal(target, eagle3=str(only_fc_norm))
    kimi = Path(__file__).resolve().parents[2] / "assets" / "models" / "kimi-tiny"
    assert "does not fit target" in refusal(target, eagle3_1=str(kimi / "eagle3.1"))
    remote_code = copy_with_config(tiny_root / "target", tmp_path / "remote", model_type="my_llama",
                                   auto_map={"AutoModelForCausalLM": "modeling.MyLlama"})
    assert "trust_remote_code" in refusal(str(remote_code), eagle3=eagle3)
    encoder = copy_with_config(tiny_root / "target", tmp_path / "encoder",
                               architectures=["LlamaForSequenceClassification"])
    assert "name no causal LM" in refusal(str(encoder), eagle3=eagle3)
    assert "no config.json" in refusal(str(tmp_path), eagle3=eagle3)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert "cannot read config.json of 'nobody/no-such-model'" in refusal("nobody/no-such-model", eagle3=eagle3)
    monkeypatch.setattr(own_pair, "_available_bytes", lambda: 2**20)
    too_big = refusal(target, eagle3_1=eagle31)
    assert "too big for this machine: the pair needs about" in too_big and "1 MB of memory is available" in too_big


@pytest.mark.parametrize("flag", [("SPACE_ID", "someone/eagle-playground"), ("PLAYGROUND_PUBLIC", "1")])
def test_a_public_host_refuses_local_folders(tiny_root: Path, monkeypatch: pytest.MonkeyPatch, flag) -> None:
    monkeypatch.setenv(*flag)
    assert "public host: local folders cannot be loaded" in refusal(str(tiny_root / "target"),
                                                                   eagle3=str(tiny_root / "eagle3"))


def test_a_pair_that_fails_to_load_leaves_the_others(tiny_root: Path, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The shelf registers a pair only while it loads; a load that fails takes it off again, and the least recently
    loaded pairs make room under the budget."""
    monkeypatch.setenv("PLAYGROUND_PAIRS_GB", "1")
    shelf = PairShelf()
    good = check_pair(str(tiny_root / "target"), {"eagle3": str(tiny_root / "eagle3")})
    name = good.preset.name
    assert shelf.load(good, lambda preset: None).name == name and get_preset(name) == good.preset
    broken = tmp_path / "broken"
    shutil.copytree(tiny_root / "target", broken)
    bad = check_pair(str(broken), {"eagle3": str(tiny_root / "eagle3")})

    def fail(preset) -> None:
        raise OSError("model.safetensors is truncated")

    with pytest.raises(OSError):
        shelf.load(bad, fail)
    with pytest.raises(KeyError):
        get_preset(bad.preset.name)
    assert get_preset(name) == good.preset
    big = own_pair.PairCheck(bad.preset, 2**30, ())  # the whole budget: the older pair goes first
    shelf.load(big, lambda preset: None)
    with pytest.raises(KeyError, match="load it again"):
        get_preset(name)


def test_a_hub_download_reports_the_bytes_received_and_loads_from_the_snapshot(
        tiny_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No Hub is reachable here, so huggingface_hub's snapshot_download is stood in for by one that writes 4 MB into
    the Hub cache's blobs folder over ~0.4 s: the progress reads the bytes as they arrive, the target's revision and
    the allowed file patterns are passed on, the pair is loaded from the snapshot folder, and a failed download is one
    line."""
    import huggingface_hub
    from huggingface_hub import constants

    from playground.presets import Preset

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(own_pair, "PROGRESS_EVERY_S", 0.05)
    calls = []

    def snapshot(repo: str, revision=None, allow_patterns=None) -> str:
        blobs = tmp_path / "hub" / f"models--{repo.replace('/', '--')}" / "blobs"
        blobs.mkdir(parents=True)
        for i in range(4):
            (blobs / f"{i}.incomplete").write_bytes(b"x" * 2**20)
            time.sleep(0.1)
        calls.append((repo, revision, allow_patterns))
        return str(tiny_root / "target")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot)
    preset = Preset(name="own:org/target@000000", title="org/target", target="org/target",
                    drafters={"eagle3": str(tiny_root / "eagle3")})
    check = own_pair.PairCheck(preset, 1, (), revision="v1", hub_bytes={"org/target": 4 * 2**20})
    said = []
    local = own_pair.download(check, lambda message, fraction=None: said.append((message, fraction)))
    assert local.target == str(tiny_root / "target") and local.drafters == preset.drafters
    assert calls == [("org/target", "v1", own_pair.HUB_FILES)]
    fractions = [f for _, f in said]
    assert fractions == sorted(fractions) and fractions[-1] == 1.0 and any(0 < f < 1 for f in fractions), said
    assert said[-1][0].startswith("downloading org/target: 4 MB received (its files: 4 MB")

    def broken(repo: str, revision=None, allow_patterns=None) -> str:
        raise OSError("connection reset\nby peer")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", broken)
    with pytest.raises(PairRefused) as refused:
        own_pair.download(check)
    assert str(refused.value) == "cannot download 'org/target': OSError: connection reset"


def test_a_hub_repository_without_safetensors_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Hub's file list (stood in for: no Hub here) decides before any weights are fetched: pickled weights only
    are refused; a missing repository is one line naming it."""
    import huggingface_hub
    from huggingface_hub.hf_api import RepoSibling

    listings = {"org/pickled": ["config.json", "pytorch_model.bin"],
                "org/fine": ["config.json", "model.safetensors", "tokenizer.json", "modeling_x.py"]}

    class Api:
        def model_info(self, repo, revision=None, files_metadata=False):
            if repo not in listings:
                raise type("RepositoryNotFoundError", (Exception,), {})("404 Client Error\nnot found")
            return type("Info", (), {"siblings": [RepoSibling(rfilename=f, size=10) for f in listings[repo]]})()

    monkeypatch.setattr(huggingface_hub, "HfApi", Api)
    with pytest.raises(PairRefused, match="ships no safetensors weights"):
        own_pair._hub_bytes("org/pickled", "")
    assert own_pair._hub_bytes("org/fine", "main") == 30  # the modelling code is not counted: it is never fetched
    with pytest.raises(PairRefused, match="^no model 'org/missing' on the Hugging Face Hub"):
        own_pair._hub_bytes("org/missing", "")


def test_a_missing_folder_says_so_and_an_unreachable_hub_answers_within_seconds(
        tiny_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A path that does not exist is "no such folder", not a repo-id validation message; a file given for a folder
    says it is a file (as the target or a drafter); a Hub id on a machine that cannot reach the Hub is refused within
    the probe's seconds, saying so (the probe here is a closed port on this machine's loopback: no traffic leaves
    it)."""
    import socket

    from playground.request import fit

    for missing in ("/no/such/place", "./not-here", "runs/a/b"):
        with pytest.raises(PairRefused, match="no such folder") as refused:
            check_pair(missing, {"eagle3": str(tiny_root / "eagle3")})
        assert "Repo id" not in str(refused.value) and "\n" not in str(refused.value)
    a_file = str(tiny_root / "target" / "config.json")
    with pytest.raises(PairRefused, match=f"^target: {a_file} is a file, not a folder"):
        check_pair(a_file, {"eagle3": str(tiny_root / "eagle3")})
    with pytest.raises(PairRefused, match="is a file, not a folder") as refused:
        check_pair(str(tiny_root / "target"), {"eagle3": a_file})
    assert "no such folder" not in str(refused.value)
    with socket.socket() as spare:
        spare.bind(("127.0.0.1", 0))
        closed = spare.getsockname()[1]  # nothing listens once the socket closes
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{closed}")
    started = time.monotonic()
    with pytest.raises(PairRefused, match="cannot be reached") as refused:
        check_pair("someone/made-up-model", {"eagle3": str(tiny_root / "eagle3")})
    assert time.monotonic() - started < 10 and "127.0.0.1" in str(refused.value)
    assert fit.hub_unreachable(f"http://127.0.0.1:{closed}", timeout_s=2) is not None
