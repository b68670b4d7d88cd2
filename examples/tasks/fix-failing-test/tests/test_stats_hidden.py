import unittest

from stats import mean, spread


class HiddenStatsTest(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(mean([2, 4, 6]), 4)
        self.assertEqual(mean([5]), 5)
        self.assertAlmostEqual(mean([1, 2]), 1.5)

    def test_spread(self):
        self.assertEqual(spread([3, 9, 1]), 8)
