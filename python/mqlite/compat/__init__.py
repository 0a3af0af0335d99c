"""Drop-in replacements for other queue libraries, built on mqlite.

- :mod:`mqlite.compat.persistqueue`: the queues of the ``persist-queue``
  package (``import mqlite.compat.persistqueue as persistqueue``).
"""
