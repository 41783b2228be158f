"""Small generated corpora for the tests that need *a* corpus rather than the real ones.

Everything here is made by a seeded generator from the word lists below (written for these tests),
so a clone without `../shared/data` still exercises the text pipelines end to end. Tests that need
the real corpora (statistics of real English, WikiText's articles) use `conftest.SHARED_DATA` and
skip without it.

* `wikitext_like()`: articles laid out like WikiText (` = Title = ` lines, ` = = Section = = `
  headings, ` ` blank lines, space-separated tokens with punctuation split off), sentences from a
  small grammar; 60 articles are about 40 KB.
* `labelled_sentences()`: `sentence<TAB>label` lines, 1 positive / 0 negative, alternating, each
  sentence made of opinion words of its class, so a model can learn the labels; under 80 bytes each,
  200 lines are about 11 KB.
"""

from __future__ import annotations

import random
from pathlib import Path

PLACES = ["Alder", "Brook", "Cairn", "Dunmore", "Elm", "Fenwick", "Glen", "Harrow", "Ivel", "Juniper", "Kestrel",
          "Larch", "Moss", "Northby", "Oakham", "Pell", "Quarry", "Rush", "Stow", "Thorn"]
KINDS = ["River", "Bridge", "Castle", "Railway", "Church", "Mill", "Harbour", "Lighthouse", "Canal", "Abbey"]
SECTIONS = ["History", "Description", "Construction", "Later years", "Legacy", "Geography"]
SUBJECTS = ["the town", "the council", "a local builder", "the company", "the first owner", "a survey",
            "the new line", "the old road", "the parish", "an engineer"]
VERBS = ["built", "repaired", "extended", "described", "sold", "rebuilt", "opened", "closed", "measured", "named"]
OBJECTS = ["the north wall", "a stone tower", "the main gate", "two new arches", "the lower dock", "a wooden roof",
           "the east wing", "the long pier", "a small chapel", "the water wheel"]
TIMES = ["in {year}", "after the flood of {year}", "before {year}", "during the winter of {year}",
         "between {year} and {later}"]
EXTRAS = ["", " , and the work took {n} years", " at a cost of {n} @,@ 000 pounds", " with {n} workers",
          " , as the records of the time show"]

FOODS = ["soup", "bread", "pasta", "salad", "burger", "curry", "pie", "coffee", "steak", "dessert", "pizza", "fish"]
PLACES_TO_EAT = ["place", "diner", "cafe", "restaurant", "bistro", "bar"]
POSITIVE = {
    "adj": ["great", "delicious", "fresh", "lovely", "excellent", "tasty", "perfect", "wonderful", "superb"],
    "staff": ["friendly", "kind", "helpful", "quick", "attentive", "welcoming"],
    "end": ["We will be back.", "Highly recommended!", "Loved it.", "A real gem.", "Worth every penny."],
}
NEGATIVE = {
    "adj": ["cold", "bland", "stale", "awful", "greasy", "soggy", "burnt", "terrible", "tasteless"],
    "staff": ["rude", "slow", "careless", "unfriendly", "dismissive", "sloppy"],
    "end": ["Never again.", "Avoid this one.", "What a waste.", "Very disappointing.", "Not worth it."],
}
SENTIMENT_FORMS = [
    "The {food} was {adj} and the staff were {staff}. {end}",
    "{Adj} {food}, {staff} service. {end}",
    "This {venue} has {adj} {food} and {staff} waiters.",
    "Our {food} came {adj}; the waiter was {staff}.",
    "I found the {food} {adj} and everyone {staff_was}.",
]


def _sentence(rng: random.Random) -> str:
    year = rng.randint(1600, 1990)
    time = rng.choice(TIMES).format(year=year, later=year + rng.randint(2, 40))
    extra = rng.choice(EXTRAS).format(n=rng.randint(2, 90))
    return f"{rng.choice(SUBJECTS).capitalize()} {rng.choice(VERBS)} {rng.choice(OBJECTS)} {time}{extra} ."


def wikitext_like(n_articles: int = 60, seed: int = 0) -> str:
    """`n_articles` WikiText-style articles (a title, 1-2 paragraphs, a section with 1 paragraph)."""
    rng = random.Random(seed)
    lines = []
    for _ in range(n_articles):
        lines += [" ", f" = {rng.choice(PLACES)} {rng.choice(KINDS)} = ", " "]
        for _ in range(rng.randint(1, 2)):
            lines += [" " + " ".join(_sentence(rng) for _ in range(rng.randint(2, 5))) + " ", " "]
        lines += [f" = = {rng.choice(SECTIONS)} = = ", " ",
                  " " + " ".join(_sentence(rng) for _ in range(rng.randint(2, 4))) + " ", " "]
    return "\n".join(lines) + "\n"


def labelled_sentences(n_per_class: int = 100, seed: int = 0) -> str:
    """`2 * n_per_class` lines `sentence<TAB>label`, positive (1) and negative (0) alternating."""
    rng = random.Random(seed)
    out = []
    for i in range(2 * n_per_class):
        label = 1 - i % 2
        words = POSITIVE if label else NEGATIVE
        adj, staff = rng.choice(words["adj"]), rng.choice(words["staff"])
        sentence = rng.choice(SENTIMENT_FORMS).format(
            food=rng.choice(FOODS), venue=rng.choice(PLACES_TO_EAT), adj=adj, Adj=adj.capitalize(), staff=staff,
            staff_was=f"was {staff}", end=rng.choice(words["end"]),
        )
        out.append(f"{sentence}\t{label}")
    return "\n".join(out) + "\n"


def write_corpora(folder: Path) -> dict[str, Path]:
    """Write both corpora into `folder`; returns {"lm": articles.txt, "sentiment": sentences.txt}."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"lm": folder / "articles.txt", "sentiment": folder / "sentences.txt"}
    paths["lm"].write_text(wikitext_like(), encoding="utf-8")
    paths["sentiment"].write_text(labelled_sentences(), encoding="utf-8")
    return paths
