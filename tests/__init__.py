"""The test suite: a package, so that `from tests import fakes` finds this one and no other."""
