"""Root of the test suite.

Its presence is the point: ``tests/`` has no ``__init__.py``, so when pytest loads this file it
puts ``tests/`` on ``sys.path``, and every test package -- with or without an ``__init__.py``
of its own -- can import the suite-wide helpers that live here (``from waiting import
wait_until``). Fixtures stay in each package's own conftest; the real servers come from the
``hmbclient.testing`` pytest plugin.
"""
