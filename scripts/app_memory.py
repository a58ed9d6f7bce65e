"""The app's resident memory across a long mixed session, as a visitor's API calls make it.

    python scripts/app_memory.py --out assets/bench/memory/app-session.json

Starts app.py on the default pair (tests/support/appserver.running_app: one torch thread, niced), then, each as a new
visitor: 10 chats, 3 comparisons (EAGLE-3 against EAGLE-3.1), a chat with a 16-node tree and 3 more chats, reading
the resident memory (VmRSS) of the app and its child processes after each. Prints and writes [label, MB] pairs.
"""
import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from gradio_client import Client  # noqa: E402

from tests.support.appserver import running_app  # noqa: E402


def rss_mb(pid: int) -> float:
    """VmRSS of `pid` and its children, in MB."""
    children = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
    total = 0
    for process in [pid, *map(int, children)]:
        try:
            total += sum(int(line.split()[1]) for line in Path(f"/proc/{process}/status").read_text().splitlines()
                         if line.startswith("VmRSS:"))
        except OSError:
            pass
    return total / 1024

CHAT = dict(drafter="eagle3.1", k=4, preset="smollm2-135m", temperature=0.0, top_p=1.0, max_new_tokens=96,
            chat_template="default", system="", seed="")
prompts = ["Explain how a hash map handles collisions.", "Write a haiku about autumn rain.",
           "What causes the seasons on Earth?", "Give three tips for writing clear emails.",
           "Write a Python function that counts vowels in a string.", "Why is the sky blue?",
           "Describe the water cycle in four sentences.", "What is a closure in JavaScript?",
           "List five uses of a paperclip.", "How do vaccines train the immune system?"]
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--out", help="a JSON file for the readings")
parser.add_argument("--log", default="app-memory.log", help="the app's log")
args = parser.parse_args()
with running_app(None, Path(args.log), timeout_s=300) as url:
    pid = int(subprocess.run(["pgrep", "-f", "app.py"], capture_output=True, text=True).stdout.split()[0])
    readings = [("start", rss_mb(pid))]
    for i, prompt in enumerate(prompts, 1):
        client = Client(url, verbose=False)  # a new visitor each time: a session of its own
        client.predict(prompt, **CHAT, api_name="/chat")
        readings.append((f"chat {i}", rss_mb(pid)))
        print(readings[-1], flush=True)
    for i, prompt in enumerate(prompts[:3], 1):
        client = Client(url, verbose=False)
        client.predict(prompt, left_drafter="eagle3", left_k=4, right_drafter="eagle3.1", right_k=4,
                       preset="smollm2-135m", temperature=0.0, top_p=1.0, max_new_tokens=64, chat_template="default",
                       system="", seed="", api_name="/compare")
        readings.append((f"compare {i}", rss_mb(pid)))
        print(readings[-1], flush=True)
    client = Client(url, verbose=False)
    client.predict(prompts[0], **{**CHAT, "tree_nodes": 16}, api_name="/chat")
    readings.append(("tree chat", rss_mb(pid)))
    for i, prompt in enumerate(prompts[3:6], 11):
        client = Client(url, verbose=False)
        client.predict(prompt, **CHAT, api_name="/chat")
        readings.append((f"chat {i}", rss_mb(pid)))
    print(json.dumps(readings))
    if args.out:
        Path(args.out).write_text(json.dumps(readings) + "\n")
