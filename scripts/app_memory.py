"""The app's resident memory across a varied session, as a visitor's API calls make it.

    python scripts/app_memory.py --out assets/bench/memory/app-session.json [--rounds 2]

Starts app.py on the default pair (tests/support/appserver.running_app: one torch thread, niced), then runs, each call
as a new visitor unless it reads the last one's answer: 11 chats at k = 2, 4 and 8, a chat with k auto, a chat with a
16-node draft tree, a replay of the last answer, a comparison (EAGLE-3 against EAGLE-3.1) and the smoke bench; the
whole session `--rounds` times. After each it reads the app process's own resident memory (VmRSS) and that of its
child processes (vLLM's engines, if any: none here, the session stays on our engine). Writes the readings with the
machine's load, the CPU and the command, so a reader can tell what ran beside.
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from gradio_client import Client  # noqa: E402

from tests.support.appserver import running_app  # noqa: E402

CHAT = dict(drafter="eagle3.1", k=4, preset="smollm2-135m", temperature=0.0, top_p=1.0, max_new_tokens=96,
            chat_template="default", system="", seed="")
COMPARE = dict(left_drafter="eagle3", left_k=4, right_drafter="eagle3.1", right_k=4, preset="smollm2-135m",
               temperature=0.0, top_p=1.0, max_new_tokens=64, chat_template="default", system="", seed="")
PROMPTS = ["Explain how a hash map handles collisions.", "Write a haiku about autumn rain.",
           "What causes the seasons on Earth?", "Give three tips for writing clear emails.",
           "Write a Python function that counts vowels in a string.", "Why is the sky blue?",
           "Describe the water cycle in four sentences.", "What is a closure in JavaScript?",
           "List five uses of a paperclip.", "How do vaccines train the immune system?",
           "What is the difference between a list and a tuple in Python?"]


def rss_mib(pid: int) -> float:
    """VmRSS of `pid`, in MiB (0 once it is gone)."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0.0
    return next((int(line.split()[1]) / 1024 for line in lines if line.startswith("VmRSS:")), 0.0)


def children_mib(pid: int) -> float:
    import psutil

    total = 0.0
    for child in psutil.Process(pid).children(recursive=True):
        total += rss_mib(child.pid)
    return total


def session() -> list[tuple[str, str, dict, object]]:
    """One varied session: (label, API name, keyword arguments, positional ones) in order; a replay reads the last
    visitor's last answer."""
    calls = [(f"chat {i} (k={k})", "/chat", dict(CHAT, k=k), PROMPTS[i - 1])
             for i, k in enumerate([2, 4, 8] * 3 + [2, 4], 1)]
    calls += [("chat k auto", "/chat", dict(CHAT, k_auto=True), PROMPTS[0]),
              ("chat tree 16 nodes", "/chat", dict(CHAT, tree_nodes=16), PROMPTS[1]),
              ("chat before replay", "/chat", CHAT, PROMPTS[2]),
              ("replay", "/replay", {}, None),
              ("compare", "/compare", COMPARE, PROMPTS[3]),
              ("smoke bench", "/bench", {}, ("smoke", "smollm2-135m"))]
    return calls


def run(url: str, pid: int, rounds: int, save) -> list[dict]:
    """The session's readings; `save(readings)` after each, so that a session cut short leaves what it read."""
    readings = [{"label": "start", "app_mib": round(rss_mib(pid), 1), "children_mib": round(children_mib(pid), 1)}]
    print(readings[-1], flush=True)
    client = None
    for round_ in range(1, rounds + 1):
        for label, api, kwargs, args in session():
            if api != "/replay":
                client = Client(url, verbose=False)  # a new visitor: a session of its own
            began = time.perf_counter()
            positional = args if isinstance(args, tuple) else () if args is None else (args,)
            client.predict(*positional, **kwargs, api_name=api)
            readings.append({"label": f"round {round_}: {label}", "seconds": round(time.perf_counter() - began, 1),
                             "app_mib": round(rss_mib(pid), 1), "children_mib": round(children_mib(pid), 1),
                             "load_1m": round(os.getloadavg()[0], 2)})
            print(readings[-1], flush=True)
            save(readings)
    return readings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="a JSON file for the readings")
    parser.add_argument("--rounds", type=int, default=1, help="how many times the session runs (default 1)")
    parser.add_argument("--log", default="app-memory.log", help="the app's log")
    parser.add_argument("--beside", default="", help="what else ran on the machine meanwhile, in words")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True,
                            text=True).stdout.strip()
    header = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "commit": commit,
              "cpu": _cpu_name(), "cores": os.cpu_count(), "beside": args.beside}

    def save(readings: list[dict]) -> None:
        if not args.out:
            return
        first_chat = next((r["app_mib"] for r in readings if r["label"].startswith("round 1: chat 1 ")), None)
        most = max(r["app_mib"] for r in readings)
        result = {**header, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "after_first_chat_mib": first_chat, "most_mib": most,
                  "growth_after_first_chat_mib": None if first_chat is None else round(most - first_chat, 1),
                  "readings": readings}
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")

    with running_app(None, Path(args.log).resolve(), timeout_s=600) as url:
        import psutil

        pid = next(p.pid for p in psutil.Process().children(recursive=True)
                   if any(part.endswith("app.py") for part in p.cmdline()))
        readings = run(url, pid, args.rounds, save)
    save(readings)
    print(json.dumps(readings))


def _cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    main()
