"""The `tasks` prompt collection: longer, benchmark-shaped requests, so drafters see what users and benchmarks ask.

The `base` collection (prompts.py) asks short questions; on MT-Bench- and HumanEval-kind prompts the first drafters
accepted far less than on held-out base prompts. This collection adds, built offline and deterministically:

- function completion: a signature and docstring mined from the standard library, asked in the same words as a
  HumanEval item ("Complete the following Python function." and a code block) — the functions themselves are ours;
- MT-Bench-shaped requests in its eight categories (writing, roleplay, reasoning, maths, coding, extraction, STEM,
  humanities), written from templates with several constraints each, and MT-Bench-style follow-ups.

MT-Bench and HumanEval (assets/prompts) are never read here; `scripts/build_prompt_sets.py` checks that no
training prompt equals one of theirs.
"""

from __future__ import annotations

import ast
import copy
import random

from playground.train import corpus
from playground.train.prompts import CODE_TASKS, CONCEPTS, LANGUAGES, WRITING_TOPICS, PromptItem, as_items

NO_SYSTEM_FRACTION = 0.5
FOLLOW_UP_FRACTION = 0.3
SECOND_DRAW_FOLLOW_UP_FRACTION = 0.15
MAX_COMPLETION_BODY_LINES = 30  # longer stdlib functions make answers that never fit the token budget

TASK_FOLLOW_UPS = (
    "Rewrite your previous response in a more formal tone.", "Now summarize your answer in three sentences.",
    "Can you add an example to illustrate your answer?", "Rewrite your answer for a ten-year-old.",
    "What are the limitations of your answer?", "Turn your answer into a numbered list.",
    "Can you write a unit test for that code?", "What is the time complexity of your solution?",
    "Rewrite your previous response. Start every sentence with the letter S.",
    "Now do the same thing, but explain each step.", "Can you make it more concise?",
)
PERSONAS = (
    "a pirate captain", "Sherlock Holmes", "a medieval knight", "a tour guide in Rome", "a friendly robot",
    "a grumpy chef", "a sports commentator", "a NASA engineer", "a kindergarten teacher",
    "a detective in 1920s Chicago",
    "a wise old wizard", "a startup founder", "a marine biologist", "a stand-up comedian", "a librarian",
)
AUDIENCES = ("a five-year-old", "a high-school student", "a busy executive", "a new employee", "a skeptical friend")
DOCUMENTS = (
    "a travel blog post", "a product review", "a persuasive essay", "a short speech", "a formal letter",
    "a press release", "a LinkedIn post", "a restaurant review", "a newsletter intro", "a short biography",
)
ASPECTS = (
    "cultural experiences", "practical tips", "surprising facts", "the costs involved", "personal anecdotes",
    "the history behind it", "what to avoid", "how it has changed over time", "its environmental impact",
)
EVENTS = (
    "the invention of the printing press", "the fall of the Berlin Wall", "the Industrial Revolution",
    "the Silk Road", "the moon landing", "the spread of the internet", "the Renaissance", "the abolition of slavery",
    "the Black Death", "the discovery of penicillin", "the rise of social media", "the French Revolution",
)
DOMAINS = ("economics", "culture", "science", "politics", "daily life", "education", "art")
CITIES = ("Paris", "Tokyo", "Nairobi", "Lima", "Oslo", "Toronto", "Mumbai", "Sydney", "Cairo", "Berlin")
COMPANIES = ("Acme Corp", "Globex", "Initech", "Umbrella Ltd", "Stark Tools", "Wayne Foods", "Hooli", "Vandelay")
PEOPLE = ("Maria Lopez", "John Chen", "Aisha Khan", "Peter Novak", "Yuki Sato", "Liam O'Brien", "Fatima Ali")


def _completion_prompts(limit: int | None, rng: random.Random) -> list[str]:
    """'Complete the following Python function.' with a standard-library signature and docstring (all when no
    limit)."""
    found = []
    for _, path in corpus.stdlib_files():
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except SyntaxError:
            continue
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or node.name.startswith("_"):
                continue
            doc = ast.get_docstring(node)
            if not doc or len(doc) < 40 or node.end_lineno - node.lineno > MAX_COMPLETION_BODY_LINES:
                continue
            stub = copy.copy(node)
            stub.body, stub.decorator_list = [ast.Expr(ast.Constant(ast.get_docstring(node, clean=False)))], []
            found.append(f"Complete the following Python function.\n\n```python\n{ast.unparse(stub)}\n```")
    return rng.sample(found, len(found) if limit is None else min(limit, len(found)))


def _writing(rng: random.Random) -> str:
    a, b = rng.sample(ASPECTS, 2)
    return rng.choice([
        f"Compose {rng.choice(DOCUMENTS)} about {rng.choice(WRITING_TOPICS)}, highlighting {a} and {b}.",
        f"Draft a professional email to {rng.choice(PEOPLE)} asking for feedback on {rng.choice(DOCUMENTS)} you "
        f"wrote about {rng.choice(CONCEPTS)}. Keep it short and polite.",
        f"Write a {rng.choice((150, 200, 250))}-word story that begins with the sentence: \"The door was already "
        f"open when {rng.choice(PEOPLE).split()[0]} arrived.\"",
        f"Write {rng.choice(DOCUMENTS)} comparing {rng.choice(CITIES)} and {rng.choice(CITIES)} as places to live. "
        f"Use at most three paragraphs.",
    ])


def _roleplay(rng: random.Random) -> str:
    persona = rng.choice(PERSONAS)
    return rng.choice([
        f"Pretend you are {persona}. Explain {rng.choice(CONCEPTS)} to {rng.choice(AUDIENCES)}.",
        f"Act as {persona}. What would you say to someone who is nervous about {rng.choice(WRITING_TOPICS)}?",
        f"Imagine you are {persona} giving a short speech about {rng.choice(CONCEPTS)}. Stay in character.",
        f"You are {persona}. Describe your typical day in a few paragraphs.",
    ])


def _reasoning(rng: random.Random) -> str:
    n, m, k = rng.randint(3, 12), rng.randint(2, 9), rng.randint(2, 6)
    x, y = rng.sample(PEOPLE, 2)
    return rng.choice([
        f"There are {n} people in a room. Each one shakes hands with every other person once. How many handshakes "
        f"are there? Explain your reasoning step by step.",
        f"{x} is {k} years older than {y}. In {m} years, {x} will be twice as old as {y} was {m} years ago. How old "
        f"is each now? Think it through step by step.",
        f"A clock shows {n % 12 + 1}:{m * 5:02d}. What is the angle between the hour and minute hands? Explain.",
        f"If it takes {k} machines {k} minutes to make {k} widgets, how long would it take {n * k} machines to make "
        f"{n * k} widgets? Explain.",
        f"You have {n} coins, one of them lighter than the others, and a balance scale. What is the fewest number of "
        f"weighings that always finds it? Explain your strategy.",
    ])


def _maths(rng: random.Random) -> str:
    a, b, c = rng.randint(2, 40), rng.randint(2, 40), rng.randint(2, 9)
    return rng.choice([
        f"The vertices of a triangle are at (0, 0), ({a}, 0) and (0, {b}). What is its area and its perimeter?",
        f"Solve the system of equations: {c}x + y = {a}, x - y = {b}. Show each step.",
        f"What is the probability of rolling a sum of {c + 3} with two fair dice? Explain.",
        f"Find all integers x such that |x - {a}| < {c}. Explain your answer.",
        f"A sum of {a * 100} dollars is invested at {c}% interest compounded yearly. How much is it worth after "
        f"{b % 10 + 2} years? Show the formula.",
        f"What is the remainder when {a}^{c} is divided by {b % 7 + 3}? Explain your method.",
    ])


def _coding(rng: random.Random) -> str:
    lang, task = rng.choice(LANGUAGES[:6]), rng.choice(CODE_TASKS)
    return rng.choice([
        f"Write a {lang} program that {task}. Explain how it works and give its time complexity.",
        f"Implement a function that {task} without using any built-in library helpers, then show example usage.",
        f"Here is a task: a function that {task}. Write it in Python with type hints and a docstring, and list "
        f"the edge cases it handles.",
        f"Write a {lang} function that {task}, and a few test cases for it.",
    ])


def _extraction(rng: random.Random) -> str:
    person, company, city = rng.choice(PEOPLE), rng.choice(COMPANIES), rng.choice(CITIES)
    year, amount = rng.randint(1990, 2024), rng.randint(2, 900)
    text = (f"In {year}, {person} joined {company} in {city} as head of research. Two years later the company "
            f"opened a second office and its revenue grew to {amount} million dollars.")
    return rng.choice([
        f"Extract the people, companies, places and years from the text below and return them as JSON.\n\n{text}",
        f"Read the text below and answer: who, what, where and when? Use one line each.\n\n{text}",
        f"Summarize the following text in one sentence, then list every number it mentions.\n\n{text}",
    ])


def _stem(rng: random.Random) -> str:
    concept = rng.choice(CONCEPTS)
    return rng.choice([
        f"Describe {concept} in detail. What are its practical applications?",
        f"Explain the key principles of {concept}, and give two real-world examples.",
        f"What are common misconceptions about {concept}? Correct each one.",
        f"How would you explain {concept} to {rng.choice(AUDIENCES)}? Use an analogy.",
    ])


def _humanities(rng: random.Random) -> str:
    event, domain = rng.choice(EVENTS), rng.choice(DOMAINS)
    return rng.choice([
        f"Discuss the impact of {event} on {domain}.",
        f"What were the main causes and consequences of {event}?",
        f"Compare {event} with {rng.choice(EVENTS)}. What do they have in common?",
        f"Write a short essay on how {event} still shapes {domain} today.",
    ])


CATEGORIES = {"writing": _writing, "roleplay": _roleplay, "reasoning": _reasoning, "maths": _maths,
              "coding": _coding, "extraction": _extraction, "stem": _stem, "humanities": _humanities}


def build_task_prompts(seed: int = 0, completions: int | None = 350, per_category: int = 90,
                       exclude: frozenset[str] = frozenset(),
                       follow_up_fraction: float = FOLLOW_UP_FRACTION) -> list[PromptItem]:
    """Every prompt of a `tasks` draw, in a fixed shuffled order, leaving out the texts in `exclude`."""
    rng = random.Random(f"tasks:{seed}")
    raw = [("completion", text) for text in _completion_prompts(completions, rng)]
    raw += [(kind, make(rng)) for kind, make in CATEGORIES.items() for _ in range(per_category)]
    raw = [(kind, text) for kind, text in raw if text not in exclude]
    return as_items(raw, rng, NO_SYSTEM_FRACTION, TASK_FOLLOW_UPS, follow_up_fraction)


def build_second_draw(seed: int = 0) -> list[PromptItem]:
    """The `tasks2` round: the same templates drawn again, every standard-library function the first draw left, and
    nothing the first draw asked; fewer follow-ups, whose long second turns cost the most to distill."""
    first = frozenset(item.messages[-1]["content"] for item in build_task_prompts(seed))
    return build_task_prompts(seed + 1, completions=None, exclude=first,
                              follow_up_fraction=SECOND_DRAW_FOLLOW_UP_FRACTION)
