"""Texts written by this script itself: the four fixture prompts and the tokenizer training corpus.

Everything is deterministic (a splitmix64 counter picks sentences), so regenerating the fixtures
gives the same prompts on any machine.
"""

from __future__ import annotations

from tiny_spec import splitmix64_scalar

PLAIN_PROMPT = ("Water boils at one hundred degrees Celsius at sea level, but on the top of a high "
                "mountain it boils at")

CHAT_QUESTION = "What are three good reasons to learn a second language? Answer briefly."

# Two spaces before a digit ("0,  1") exercise the SmolLM2 Digits pre-tokenizer split.
CODE_PROMPT = '''def fibonacci(n):
    """Return the n-th Fibonacci number."""
    a, b = 0,  1
    for _ in range(n):
        a, b = b, a + b
    return a


def main():
    values = [fibonacci(i) for i in range(10)]
    print('''

LONG_FACT = "The access code for the blue storage room is 4829."
LONG_QUESTION = ("\n\nQuestion: What is the access code for the blue storage room?\n"
                 "Answer: The access code for the blue storage room is")

_NAMES = ["Mara", "Tomas", "Ingrid", "Kofi", "Lena", "Ravi", "Sofia", "Emil", "Noor", "Pavel"]
_PLACES = ["the north pier", "the lighthouse", "the weather mast", "the boat shed", "the kitchen",
           "the radio room", "the greenhouse", "the old chapel", "the supply depot", "the cliffs"]
_THINGS = ["a coil of rope", "the spare generator", "a crate of apples", "the brass telescope",
           "a box of batteries", "the logbook", "a stack of charts", "the water pump",
           "a bag of flour", "the signal lamp"]
_WEATHER = ["a cold wind from the east", "thick fog until noon", "light rain and low clouds",
            "bright sunshine and calm water", "a storm that rattled the windows",
            "heavy snow in the afternoon", "a warm breeze from the south", "hail for an hour"]
_TEMPLATES = [
    "{name} walked to {place} before breakfast and checked {thing}.",
    "The morning brought {weather}, so most of the work moved indoors.",
    "At {hour} o'clock {name} noted that {thing} needed repair.",
    "{name} and {name2} carried {thing} from {place} to {place2}.",
    "In the evening the team shared a quiet meal and talked about the mainland.",
    "The barometer fell by {num} millibars during the day.",
    "{name} wrote {num} pages of notes about the birds nesting near {place}.",
    "A fishing boat passed the island at {hour} o'clock and signalled twice.",
    "Nobody could find {thing}, until {name} remembered leaving it at {place}.",
    "The radio reported {weather} for the next {num} days.",
    "{name2} repaired the roof of {place} with help from {name}.",
    "The generator ran for {num} hours and used most of the fuel.",
    "After dinner {name} read aloud from an old book about sailing ships.",
    "The tide was unusually high, reaching the steps of {place}.",
    "{name} counted {num} seals resting on the rocks below {place}.",
    "A letter from the mainland asked the station to measure the wind every {num} hours.",
]


class _Counter:
    """Deterministic choices from a splitmix64 counter."""

    def __init__(self, seed: int):
        self.state = seed

    def below(self, n: int) -> int:
        self.state += 1
        return splitmix64_scalar(self.state) % n


def station_log(seed: int, days: int, fact: str | None) -> str:
    rng = _Counter(seed)
    paras = []
    for day in range(1, days + 1):
        sents = []
        for _ in range(7):
            t = _TEMPLATES[rng.below(len(_TEMPLATES))]
            name, name2 = _NAMES[rng.below(len(_NAMES))], _NAMES[rng.below(len(_NAMES))]
            place, place2 = _PLACES[rng.below(len(_PLACES))], _PLACES[rng.below(len(_PLACES))]
            sents.append(t.format(name=name, name2=name2, place=place, place2=place2,
                                  thing=_THINGS[rng.below(len(_THINGS))],
                                  weather=_WEATHER[rng.below(len(_WEATHER))],
                                  hour=1 + rng.below(12), num=2 + rng.below(40)))
        if day == 1 and fact is not None:
            sents.insert(2, "Before leaving, the old keeper gave one instruction. " + fact +
                         " Everyone was asked to remember it.")
        paras.append(f"Day {day}. " + " ".join(sents))
    return "\n\n".join(paras)


def long_prompt(days: int = 19) -> str:
    head = "Station log of the island weather station, kept by the winter crew.\n\n"
    return head + station_log(seed=20240611, days=days, fact=LONG_FACT) + LONG_QUESTION


_EXTRA = [
    "The quick brown fox jumps over the lazy dog.",
    "Machine learning models predict the next token from the tokens before it.",
    "She said: \"It's fine, we'll meet at 10:30 tomorrow.\" He didn't reply.",
    "Prices rose by 3.5% in 2023, and the bank expects 2.1% in 2024.",
    "Café, naïve, résumé, über, smørrebrød, Zürich and São Paulo are common examples.",
    "東京は日本の首都です。我想在北京工作。 Привет, как дела? مرحبا",
    "Emojis like 🙂 🚀 and 🦙 are encoded as several bytes each.",
    "for (int i = 0; i < n; ++i) { sum += values[i] * weights[i]; }",
    "import numpy as np\nx = np.zeros((3, 4), dtype=np.float32)\nprint(x.shape)",
    "SELECT name, COUNT(*) FROM users WHERE age > 30 GROUP BY name;",
    "<html><body><p class=\"note\">Hello, world!</p></body></html>",
    "The committee will review the proposal on Monday and publish its report in June.",
    "Learning a new language improves memory, opens doors to travel, and helps careers.",
    "Water freezes at zero degrees and boils at one hundred degrees Celsius.",
    "    return a + b\n\n\ndef add(a, b):\n    return a + b\n",
    "Question: What is the capital of France?\nAnswer: Paris is the capital of France.",
]


def training_corpus() -> list[str]:
    """Text for training the tiny BPE tokenizers (all of it written by this module)."""
    docs = [PLAIN_PROMPT, CHAT_QUESTION, CODE_PROMPT, long_prompt()]
    for seed in range(1, 9):
        docs.append(station_log(seed=seed * 7919, days=12, fact=None))
    docs.extend(_EXTRA * 3)
    return docs
