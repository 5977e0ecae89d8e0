"""
``ai_contrib.npc.delegation.delegate``: a script name that is its handler's method, bound, with
the handler's signature and docstring, which an instance attribute or a subclass overrides.
"""

import inspect

from ai_contrib.npc.delegation import delegate


class Counter:
    """A handler."""

    def __init__(self, owner):
        self.owner, self.calls = owner, []

    def bump(self, by=1):
        """Add ``by`` to the count."""
        self.calls.append(by)
        return len(self.calls)


class Script:
    def __init__(self):
        self.counter = Counter(self)

    add = delegate("counter", Counter.bump)


def test_the_name_calls_the_handler_with_its_signature_and_docstring():
    script = Script()
    assert script.add(by=3) == 1 and script.add() == 2
    assert script.counter.calls == [3, 1]
    assert Script.add.__name__ == "add" and Script.add.__qualname__ == "Script.add"
    assert Script.add.__doc__ == "Add ``by`` to the count."
    assert list(inspect.signature(script.add).parameters) == ["by"]
    # read on the class, as code wrapping the class's method does: called with the script
    assert Script.add(script, by=5) == 3 and script.counter.calls == [3, 1, 5]


def test_an_instance_attribute_or_a_subclass_overrides_it():
    class Louder(Script):
        def add(self, by=1):
            return "louder"

    script, other = Script(), Script()
    script.add = lambda by=1: "patched"
    assert script.add() == "patched" and script.counter.calls == []
    assert other.add() == 1  # the class's name is untouched
    assert Louder().add() == "louder"
