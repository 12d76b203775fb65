"""Runs the Python tests (unittest, no pytest needed) and prints a closing
line. Exit status 0 when nothing failed, skipped tests included (each skip is
listed with its reason); 1 otherwise. Used by CTest (`make test`)."""
import os
import sys
import unittest

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(here))  # the package next to tests/, unless installed

suite = unittest.defaultTestLoader.discover(here, pattern="test_*.py")
result = unittest.TextTestRunner(verbosity=2).run(suite)
for test, reason in result.skipped:
    print(f"skipped: {test.id()}: {reason}")
ok = result.wasSuccessful() and result.testsRun > 0
ran = result.testsRun - len(result.skipped) - len(result.failures) - len(result.errors)
print(f"detfuse python tests: {ran} passed of {result.testsRun}, {len(result.skipped)} skipped, "
      f"{len(result.failures)} failed, {len(result.errors)} errors: {'OK' if ok else 'FAILED'}")
sys.exit(0 if ok else 1)
