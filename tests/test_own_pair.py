"""A pair of one's own, checked from its configs before any weights are read (backends.own_pair): each refusal is one
line, a public host refuses local folders, and a pair that fails to load leaves the others as they were."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from playground.backends import own_pair
from playground.backends.own_pair import PairRefused, PairShelf, check_pair
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
    assert "it is an EAGLE-3 drafter" in refusal(target, eagle3_1=eagle3)  # named in the wrong slot
    kimi = Path(__file__).resolve().parents[1] / "assets" / "models" / "kimi-tiny"
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
    assert "too big for this machine: the pair needs about" in too_big and "0.0 GB of memory is available" in too_big


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
