"""
Whom a line is said to (``ai_contrib.core.addressing.vocatives``; ``docs/design.md``, "A room
of NPCs"): a name in the vocative, not one merely mentioned.
"""

from ai_contrib.core.addressing import vocatives

NAMES = {"m": ["Marta"], "h": ["Hilda", "the smith"], "f": ["Fenwick"], "t": ["Tom", "Old Tom"]}


def test_a_name_in_the_vocative_is_told_from_a_name_mentioned():
    said_to = {
        "Marta, is Fenwick always this talkative?": {"m"},
        "Marta and Hilda, a word": {"m", "h"},
        "Marta, Hilda, Fenwick: listen": {"m", "h", "f"},
        "hey Marta what news": {"m"},
        "thanks marta": {"m"},
        "Good evening, Marta!": {"m"},
        "Hello Marta and Hilda": {"m", "h"},
        "Well, Marta, what now?": {"m"},
        "oh Marta!": {"m"},
        "Good. Marta, an ale.": {"m"},
        "Tell me, Marta, is it true?": {"m"},
        "Play us a tune, the smith": {"h"},
        "How much is it, Fenwick?": {"f"},
        "Old Tom, a pie": {"t"},
        "Marta": {"m"},
    }
    mentioned = ["Is Fenwick always this talkative?", "Yes, Marta is here.", "Marta is busy",
                 "Can Hilda shoe my horse?", "Thanks to Marta we ate", "I saw Tom at the mill",
                 "Marta what is the price", "Nice weather today."]
    for line, who in said_to.items():
        assert vocatives(line, NAMES) == who, line
    for line in mentioned:  # the same names, none said to
        assert vocatives(line, NAMES) == set(), line


def test_only_the_names_given_count():
    assert vocatives("Marta, is Fenwick always this talkative?", {"f": ["Fenwick"]}) == set()
    assert vocatives("Marta, an ale", {}) == set()
    assert vocatives("", NAMES) == set()
