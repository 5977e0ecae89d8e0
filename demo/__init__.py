"""
The runnable side of evennia-ai-contrib: a real game with an LLM innkeeper, driven over telnet.

- :mod:`demo.gamectl`: make a game dir from ``game_template/``, start, stop or kill Evennia, read
  its logs (used by the demo and the end-to-end tests);
- :mod:`demo.telnet`: a scripted telnet player (telnetlib3, asyncio) and a shared transcript;
- :mod:`demo.locomo`: the LoCoMo conversation turns the demo's players replay;
- ``python -m demo`` (:mod:`demo.__main__`): the demo itself; ``--help`` lists its options.
"""
