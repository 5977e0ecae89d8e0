"""
An NPC's effective configuration, where each value comes from, and typed per-NPC changes
(the ``aiconfig`` command).

Resolution order (:func:`ai_contrib.settings.resolve_option`, which
:meth:`ai_contrib.typeclasses.AssistantScript.cfg` uses; ``docs/design.md``, "Per-NPC
Attributes"): the script's Attribute when it is set and not None, else the game's ``AI_<NAME>``
setting, else the contrib's default.
"""

from .settings import DEFAULTS
from .strategies import STRATEGIES
from .typeclasses import CONFIG_ATTRIBUTES

# the options aiconfig shows and sets: the documented Attributes, then the other options the
# code reads per NPC through script.cfg() (typeclasses.AssistantScript's docstring lists them)
PER_NPC_OPTIONS = CONFIG_ATTRIBUTES + (
    "compact_min_saving_tokens",
    "compact_summary_ratio",
    "mask_min_tokens",
    "cascade_immediate_window",
    "cascade_recent_window",
    "cascade_pressure_window",
    "summary_prompt_style",
    "memory_retrieval_token_budget",
    "memory_retrieval_max_items",
    "memory_retrieval_max_experiences",
    "lore_token_budget",
    "lore_scan_lines",
    "pins_token_budget",
    "compact_preserve_max_fraction",
    "compact_inflight_cap",
    "memory_note_seconds",
    # who the NPC answers (docs/design.md, "Turns, not one call per line", "A room of NPCs")
    "answer_when",
    "conversation_window",
    "npc_reply_depth",
    "npc_reply_cooldown",
    # the rest of retrieval (memory.retrieval.RETRIEVAL_OPTIONS)
    "memory_enabled",
    "memory_rrf_k",
    "memory_archive_candidates",
    "memory_retrieval_min_relative_score",
    "memory_retrieval_neighbour_weight",
    "memory_retrieval_session_weight",
)

# fractions of the token budget: 0 < value <= 1
FRACTIONS = {
    "compact_sleep_threshold", "compact_emergency_threshold", "cascade_pressure_window",
    "compact_summary_ratio", "compact_preserve_max_fraction",
}
# whole numbers that must be at least 1 (others at least 0)
POSITIVE = {"max_context_tokens", "pre_compact_max_iterations"}
CHOICES = {"compact_strategy": STRATEGIES, "summary_prompt_style": ("chat", "base"),
           "answer_when": ("addressed", "always")}
_TRUE = ("true", "yes", "on", "1")
_FALSE = ("false", "no", "off", "0")


def option_type(name):
    """The Python type option ``name`` takes: its default's, ``str`` where the default is None."""
    default = DEFAULTS[name.upper()]
    return str if default is None else type(default)


def parse_value(name, text):
    """
    ``text`` as a value of option ``name``, checked against the default's type and range.

    Args:
        name (str): a lower-case option name from :data:`PER_NPC_OPTIONS`.
        text (str): what the admin typed (``yes``/``no``/``on``/``off``/``true``/``false``
            for switches; a fraction may be written ``0.7`` or ``70%``).

    Returns:
        bool | int | float | str

    Raises:
        ValueError: unknown option, wrong type or out of range; the message says what is
            expected, fit for the admin's screen.
    """
    if name not in PER_NPC_OPTIONS:
        raise ValueError(f"Unknown option '{name}'. Options: {', '.join(PER_NPC_OPTIONS)}.")
    kind = option_type(name)
    raw = text.strip()
    if kind is bool:
        if raw.lower() in _TRUE:
            return True
        if raw.lower() in _FALSE:
            return False
        raise ValueError(f"{name} is a switch: give yes or no (got '{raw}').")
    if kind is int:
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"{name} takes a whole number (got '{raw}').") from None
        low = 1 if name in POSITIVE else 0
        if value < low:
            raise ValueError(f"{name} must be at least {low} (got {value}).")
        return value
    if kind is float:
        try:
            value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
        except ValueError:
            raise ValueError(f"{name} takes a number (got '{raw}').") from None
        if name in FRACTIONS and not 0 < value <= 1:
            raise ValueError(
                f"{name} is a fraction of the token budget: above 0, at most 1 (got '{raw}')."
            )
        if value < 0:
            raise ValueError(f"{name} must not be negative (got '{raw}').")
        return value
    if name in CHOICES:
        value = raw.lower()
        if value not in CHOICES[name]:
            raise ValueError(f"{name} is one of: {', '.join(CHOICES[name])} (got '{raw}').")
        return value
    if not raw:
        raise ValueError(f"{name} needs a value.")
    return raw
