"""The offline prompt set for self-distilling drafters on a chat target (the target answers; we only ask).

Kinds: code, explanations, writing, reasoning and maths, advice, rewriting, translation, Python-library questions
mined from the standard library (`corpus.py`), and multi-turn follow-ups. Each prompt may carry one of several
system prompts (or none: the chat template then adds its default). Everything is deterministic.

The split hashes the prompt text: about 4 % is held out for evaluation and never trained on. MT-Bench and HumanEval
(in assets/prompts) are separate evaluation sets that this module never reads.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field
from typing import Literal

from playground.train.corpus import build_conversations

Split = Literal["train", "validation"]
HELD_OUT_PERCENT = 4

SYSTEM_PROMPTS = (
    "You are a helpful assistant.",
    "You are a concise assistant. Answer briefly and precisely.",
    "You are a friendly tutor who explains things step by step.",
    "You are an expert software engineer. Prefer clear, idiomatic code.",
    "You are a creative writing assistant.",
    "You are a careful math teacher. Show your reasoning.",
)
NO_SYSTEM_FRACTION = 0.4

LANGUAGES = ("Python", "JavaScript", "C", "Java", "Go", "Rust", "SQL", "Bash")
CODE_TASKS = (
    "reverses a string", "checks whether a number is prime", "returns the n-th Fibonacci number",
    "sorts a list of numbers with bubble sort", "counts the vowels in a string", "finds the largest element of a list",
    "merges two sorted lists", "removes duplicates from a list", "checks whether a string is a palindrome",
    "computes the factorial of n", "converts Celsius to Fahrenheit", "reads a text file and counts its lines",
    "finds the greatest common divisor of two numbers", "flattens a nested list", "computes the average of a list",
    "implements binary search", "counts word frequencies in a text", "validates an email address",
    "generates all permutations of a list", "transposes a matrix", "checks whether two strings are anagrams",
    "implements a stack with push and pop", "returns the sum of the digits of a number",
    "finds the second largest number",
    "converts a decimal number to binary", "capitalizes every word in a sentence", "rotates a list by k positions",
    "finds the intersection of two lists", "implements a queue using two stacks", "parses a CSV line into fields",
    "checks whether a year is a leap year", "computes the power set of a set", "implements quicksort",
    "returns the longest word in a sentence", "counts the set bits of an integer", "implements a linked list",
    "finds the missing number in a list from 1 to n", "computes the dot product of two vectors",
    "checks balanced parentheses", "groups a list of words by their first letter",
)
CODE_FORMS = (
    "Write a {lang} function that {task}.", "How do I write a {lang} program that {task}?",
    "Show me {lang} code that {task}, with comments.", "Implement a function in {lang} that {task}.",
)
CODE_QUESTIONS = (
    "What is the difference between a list and a tuple in Python?", "How do I read a JSON file in Python?",
    "What does the `yield` keyword do in Python?", "How do I handle exceptions in JavaScript?",
    "What is a closure?", "Explain recursion with an example.", "What is the difference between SQL JOIN types?",
    "How do I reverse a linked list?", "What is Big O notation?", "How does a hash table work?",
    "What is the difference between a process and a thread?", "How do I use git rebase?",
    "What is a REST API?", "Explain object-oriented programming.", "What are Python decorators?",
    "How do I sort a dictionary by value in Python?", "What is a race condition?", "What is dependency injection?",
    "How does garbage collection work?", "What is the difference between `==` and `is` in Python?",
    "Why is my Python loop slow, and how can I speed it up?", "What is a pointer in C?",
    "How do I write a unit test in Python?", "What is a virtual environment in Python?",
    "Explain how HTTP works.", "What is the difference between TCP and UDP?", "What is a database index?",
)
CONCEPTS = (
    "photosynthesis", "gravity", "the water cycle", "inflation", "supply and demand", "the immune system",
    "black holes", "climate change", "the French Revolution", "democracy", "machine learning", "neural networks",
    "the internet", "electricity", "DNA", "evolution", "the stock market", "compound interest", "vaccines",
    "plate tectonics", "the solar system", "the Roman Empire", "the Industrial Revolution", "blockchain",
    "renewable energy", "the greenhouse effect", "quantum computing", "the theory of relativity", "antibiotics",
    "the human heart", "volcanoes", "earthquakes", "the moon's phases", "rainbows", "magnets", "sound waves",
    "the printing press", "World War I", "the Renaissance", "cryptography", "encryption", "cloud computing",
    "operating systems", "the carbon cycle", "sleep", "nutrition", "meditation", "the scientific method",
    "probability", "statistics", "algebra", "prime numbers", "the Pythagorean theorem", "calculus", "taxes",
    "a budget", "marketing", "leadership", "time management", "the Olympic Games", "jazz music", "impressionism",
)
CONCEPT_FORMS = (
    "Explain {c}.", "What is {c}?", "Explain {c} to a ten-year-old.", "How does {c} work?",
    "Give a short summary of {c}.", "Why is {c} important?", "What are the main ideas behind {c}?",
)
WRITING_FORMS = (
    "a short poem", "a haiku", "a short story", "a limerick", "a formal email", "a thank-you note",
    "a product description", "a blog post introduction", "a motivational speech", "a tweet", "a news headline and lede",
    "a cover letter opening", "a dialogue between two friends", "a recipe", "a song chorus",
)
WRITING_TOPICS = (
    "the ocean", "a rainy day", "friendship", "a robot learning to paint", "autumn leaves", "a lost cat",
    "the first day of school", "coffee", "a mountain hike", "a city at night", "space travel", "a new smartphone",
    "a birthday party", "gardening", "a dragon who is afraid of fire", "learning to code", "the last day of summer",
    "a small bakery", "a job interview", "a team winning a match",
)
ADVICE = (
    "staying focused while studying", "learning a new language", "saving money", "getting better sleep",
    "preparing for a job interview", "starting to exercise", "writing a good resume", "public speaking",
    "making friends in a new city", "reducing stress", "learning to cook", "keeping a houseplant alive",
    "planning a trip", "improving your writing", "working from home", "learning to program",
)
REWRITES = (
    "Rewrite this sentence to be more formal: \"hey, can u send me the report asap?\"",
    "Correct the grammar: \"She don't like apples and he have three cat.\"",
    ("Make this shorter: \"In my personal opinion, I think that we should probably consider the option of leaving "
     "early.\""),
    "Rewrite in the passive voice: \"The committee approved the new budget.\"",
    "Turn this into a bullet list: eggs, milk, bread, butter and coffee.",
    "Summarize in one sentence: \"The meeting covered the quarterly results, the hiring plan and the new office.\"",
    "Paraphrase: \"The early bird catches the worm.\"",
    "Make this sound friendlier: \"Your request has been denied.\"",
)
TRANSLATE_SENTENCES = (
    "Good morning, how are you?", "Where is the train station?", "I would like a cup of coffee, please.",
    "The weather is beautiful today.", "Thank you for your help.", "What time does the museum open?",
)
TRANSLATE_LANGUAGES = ("French", "Spanish", "German", "Italian")
FOLLOW_UPS = (
    "Can you make it shorter?", "Explain that in simpler terms.", "Can you give an example?",
    "Thanks! What else should I know?", "Can you summarize that in three bullet points?",
    "Why is that?", "Can you say more about the first point?",
)


@dataclass
class PromptItem:
    kind: str
    messages: list[dict]  # system?, user (the target writes the assistant turns)
    follow_up: str | None = None  # a second user turn, asked after the target's first answer
    source: dict = field(default_factory=dict)


def split_of(text: str) -> Split:
    h = int.from_bytes(hashlib.sha1(text.encode()).digest()[:4], "big")
    return "validation" if h % 100 < HELD_OUT_PERCENT else "train"


def _maths(rng: random.Random) -> str:
    a, b, c = rng.randint(2, 99), rng.randint(2, 99), rng.randint(2, 12)
    return rng.choice([
        f"What is {a} times {b}?",
        f"What is {a * c} divided by {c}?",
        f"A shop sells pencils for {c} dollars each. How much do {a} pencils cost?",
        f"A train travels at {a} km/h for {c} hours. How far does it go?",
        f"Tom has {a} apples and gives away {min(a, b)}. How many are left?",
        f"Solve for x: {c}x + {a} = {c * b + a}.",
        f"What is {a}% of {b * 10}?",
        f"If a rectangle is {a} cm long and {c} cm wide, what is its area and perimeter?",
        f"Is {a * 2 + 1} a prime number? Explain.",
        f"Convert {a} miles to kilometers.",
        f"A recipe needs {c} eggs for {a % 6 + 2} people. How many eggs for {a % 6 + 2 + c} people?",
        f"What is the sum of the numbers from 1 to {a}?",
    ])


def _reasoning(rng: random.Random) -> str:
    names = ("Alice", "Bob", "Carol", "Dan", "Eve", "Frank")
    x, y, z = rng.sample(names, 3)
    return rng.choice([
        f"{x} is taller than {y}, and {y} is taller than {z}. Who is the shortest?",
        "If all bloops are razzies and all razzies are lazzies, are all bloops lazzies? Explain.",
        f"{x} is older than {y}. {z} is younger than {y}. Who is the oldest?",
        "What comes next in the sequence 2, 4, 8, 16, ...? Explain the pattern.",
        "A bat and a ball cost $1.10 in total. The bat costs $1.00 more than the ball. How much does the ball cost?",
        "Give me three pros and three cons of working from home.",
        (f"{x} has twice as many books as {y}. Together they have {3 * rng.randint(3, 30)} books. How many does "
         "each have?"),
        "Which is heavier, a kilogram of feathers or a kilogram of steel?",
        "Compare cats and dogs as pets.",
    ])


def _library_prompts(limit: int, rng: random.Random) -> list[str]:
    """Python-library questions mined from the standard library (corpus.py), both of its splits."""
    users = [c["messages"][-2]["content"] for split in ("train", "validation") for c in build_conversations(split)]
    return rng.sample(users, min(limit, len(users)))


def build_prompts(seed: int = 0, library: int = 450) -> list[PromptItem]:
    """Every prompt of every kind, in a fixed shuffled order."""
    rng = random.Random(seed)
    raw: list[tuple[str, str]] = []
    raw += [("code", form.format(lang=lang, task=task)) for task in CODE_TASKS for lang in LANGUAGES[:6]
            for form in [rng.choice(CODE_FORMS)]]
    raw += [("code", rng.choice(CODE_FORMS).format(lang=lang, task=rng.choice(CODE_TASKS))) for lang in LANGUAGES[4:]
            for _ in range(6)]
    raw += [("code", q) for q in CODE_QUESTIONS]
    raw += [("explain", form.format(c=c)) for c in CONCEPTS for form in rng.sample(CONCEPT_FORMS, 4)]
    raw += [("writing", f"Write {form} about {topic}.") for form in WRITING_FORMS
            for topic in rng.sample(WRITING_TOPICS, 6)]
    raw += [("advice", f"Give me {rng.choice((3, 4, 5))} tips for {a}.") for a in ADVICE]
    raw += [("advice", f"How can I get better at {a}?") for a in ADVICE]
    raw += [("rewrite", r) for r in REWRITES]
    raw += [("translate", f"Translate to {lang}: \"{s}\"") for s in TRANSLATE_SENTENCES for lang in TRANSLATE_LANGUAGES]
    raw += [("maths", _maths(rng)) for _ in range(300)]
    raw += [("reasoning", _reasoning(rng)) for _ in range(120)]
    raw += [("library", q) for q in _library_prompts(library, rng)]
    return as_items(raw, rng, NO_SYSTEM_FRACTION, FOLLOW_UPS, follow_up_fraction=0.2)


def as_items(raw: list[tuple[str, str]], rng: random.Random, no_system_fraction: float, follow_ups: tuple[str, ...],
             follow_up_fraction: float) -> list[PromptItem]:
    """(kind, text) pairs as prompt items, duplicates dropped, each with a system prompt or none and maybe a
    follow-up, in a shuffled order (all from `rng`, so a collection is the same on every machine)."""
    seen, items = set(), []
    for kind, text in raw:
        if text in seen:
            continue
        seen.add(text)
        system = ([] if rng.random() < no_system_fraction
                  else [{"role": "system", "content": rng.choice(SYSTEM_PROMPTS)}])
        follow_up = rng.choice(follow_ups) if rng.random() < follow_up_fraction else None
        items.append(PromptItem(kind, system + [{"role": "user", "content": text}], follow_up))
    rng.shuffle(items)
    return items
