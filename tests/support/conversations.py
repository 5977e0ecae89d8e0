"""
Conversations the tests share as data: ``(role, speaker, text)`` lines, oldest first.
"""

#: 21 lines in Marta's tavern: the source a summary must be supported by; the summary-fidelity
#: threshold was measured on it (``docs/design.md``, "Summary fidelity")
TAVERN = [
    ("user", "Wren", "Evening, Marta. Is the road to Riverton open again?"),
    ("assistant", "Marta", "The bridge washed out on Tuesday; the carters go round by the mill."),
    ("user", "Wren", "How long does that take with a loaded cart?"),
    ("assistant", "Marta", "Two days, if the weather holds. Old Tom lost a wheel there."),
    ("user", "Tamsin", "I heard bandits were seen near the mill."),
    ("assistant", "Marta", "Rumours. The sheriff sent riders, and they found only a fox den."),
    ("user", "Wren", "I need a room for three nights and stabling for my mare."),
    ("assistant", "Marta", "The east room is free: four silver a night, stabling one more."),
    ("user", "Wren", "I will pay twelve silver now and the rest on Friday."),
    ("assistant", "Marta", "Done. Lena will bring your supper up after the bell."),
    ("user", "Tamsin", "Do you still have that honey mead from the spring?"),
    ("assistant", "Marta", "Two casks left. I keep them for the harvest feast."),
    ("user", "Tamsin", "Then save me a jug for the feast, I will pay double."),
    ("assistant", "Marta", "I'll mark one for you, Tamsin."),
    ("user", "Wren", "My brother is coming from the coast; he asks for Marta by name."),
    ("assistant", "Marta", "Your brother Corin? He still owes me for a broken bench."),
    ("user", "Wren", "He promised to mend it himself when he arrives."),
    ("assistant", "Marta", "Then tell him to bring his tools and his manners."),
    ("user", "Tamsin", "Is the smithy open tomorrow? My knife needs sharpening."),
    ("assistant", "Marta", "Gareth opens at dawn but closes early on market days."),
    ("user", "Wren", "Good night, Marta. Wake me at first light."),
]

#: 8 lines of Bob booking a room from Marta: debts, a wolf, a sister's allergy (the facts the
#: embedded model extracts in ``tests/model/test_extraction.py``)
BOOKING = [
    ("user", "Bob", "Good evening. I need a room for three nights, and a meal."),
    ("assistant", "Marta", "Welcome to the Prancing Goat. A room is 4 silver a night."),
    ("user", "Bob", "I only have 10 silver. I will pay the last 2 silver on Friday."),
    ("assistant", "Marta", "Fine, Bob. I will hold you to that promise."),
    ("user", "Bob", "Also, keep the cellar locked. I saw a wolf near the north gate."),
    ("assistant", "Marta", "A wolf? I will warn the guard captain, Elsa."),
    ("user", "Bob", "My sister Lena arrives tomorrow from Riverton. She is allergic to fish."),
    ("assistant", "Marta", "Then no fish stew for Lena. I will tell the cook."),
]


def tavern_talk(script, budget=300, preserve=4):
    """Store :data:`TAVERN` in ``script``'s history, then a preserved window of four short
    lines (Tamsin and Marta), under a ``budget``-token history (``max_context_tokens``) and a
    preserve window of ``preserve`` messages: a history one compaction brings under budget."""
    for role, name, text in TAVERN:
        script.add_message(role, text, name=name)
    for i in range(2):  # the preserved window
        script.add_message("user", f"Another ale, Marta ({i}).", name="Tamsin")
        script.add_message("assistant", "Coming up.", name="Marta")
    script.db.max_context_tokens = budget
    script.db.compact_preserve_window = preserve
