"""
Telling admins: the server log and Evennia's MudInfo channel, where staff see it in game.
"""

from __future__ import annotations

from evennia.utils import logger


def notify_admins(text) -> None:
    """
    Send ``text`` to the log (as a warning) and to the game's MudInfo channel, if it has one.

    Args:
        text (str): a plain line; it must carry no secret (it reaches every admin's screen).
    """
    logger.log_warn(text)
    try:
        from django.conf import settings
        from evennia.utils.search import search_channel

        channels = search_channel(settings.CHANNEL_MUDINFO["key"])
        if channels:
            channels[0].msg(text)
    except Exception:  # no channel configured: the log line is enough
        pass
