from evennia.utils.test_resources import BaseEvenniaTest


class TestHarness(BaseEvenniaTest):
    def test_rooms_and_characters_exist(self):
        self.assertTrue(self.char1.location == self.room1)
