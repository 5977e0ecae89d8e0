"""
Methods of the NPC's script that hand the call to one of its handlers (``docs/design.md``, "The
script's handlers"): ``AssistantScript.budget`` is ``script.budgeting.tokens``, and so on.
"""

import functools


class delegate:  # noqa: N801  (used like a decorator, as ``lazy_property`` is)
    """
    A script method that is a handler's method: reading ``script.<name>`` gives
    ``script.<handler>.<method>``, bound, so the call, its signature and its docstring are the
    handler's, with no copy to drift.

    The descriptor is non-data: an instance attribute of the same name (``mock.patch.object``
    on a script) hides it, and a subclass may override the name with a method of its own. Read
    on the class it is callable like the function it stands for (``AssistantScript.run_tick(
    script)``), so code that wraps the class's method keeps working.

    Args:
        handler (str): the script's ``lazy_property`` holding the handler (``"budgeting"``).
        method (function): the handler class's function (``BudgetHandler.tokens``); its
            ``__name__`` is looked up on the handler at each read.
    """

    def __init__(self, handler, method):
        self.handler = handler
        self.method = method.__name__
        functools.update_wrapper(self, method)

    def __set_name__(self, owner, name):
        self.__name__ = name
        self.__qualname__ = f"{owner.__qualname__}.{name}"

    def __call__(self, script, *args, **kwargs):
        return self.__get__(script)(*args, **kwargs)

    def __get__(self, script, owner=None):
        if script is None:
            return self
        return getattr(getattr(script, self.handler), self.method)
