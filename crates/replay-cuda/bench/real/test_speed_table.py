"""Checks speed_table.py on synthetic record files (no GPU): python3 test_speed_table.py"""
import json
import os
import tempfile
import unittest

import speed_table


def doc(n, dispatches, a, b):
    total = dispatches * (a + b * n)
    return {"summary": {"dispatches": dispatches, "replay_seconds": total,
                        "captured_bytes": dispatches * 1_000_000,
                        "phases": {"window": total, "wait": total / 2, "capture": total / 4,
                                   "restore": total / 4}}}


class Table(unittest.TestCase):
    def test_two_pass_counts_solve_for_dispatch_and_pass_costs(self):
        d = tempfile.mkdtemp()
        paths = []
        for n in (3, 38):
            p = os.path.join(d, "r%d.json" % n)
            with open(p, "w") as f:
                json.dump(doc(n, 151, 5.1e-3, 344e-6), f)
            paths.append(p)
        dispatches, a, b, cap = speed_table.solve(
            3, speed_table.summary(paths[0]), 38, speed_table.summary(paths[1]))
        self.assertEqual(dispatches, 151)
        self.assertAlmostEqual(a, 5.1e-3, places=9)
        self.assertAlmostEqual(b, 344e-6, places=9)
        self.assertEqual(cap, 1_000_000)
        r = speed_table.row("cnn", 11.1, 3, paths[0], 38, paths[1])
        self.assertIn("| 151 | 5.10 ms | 344 us | 1.0 MB |", r)
        self.assertIn("wait 50%", r)
        self.assertIn("capture 25%", r)


if __name__ == "__main__":
    unittest.main()
