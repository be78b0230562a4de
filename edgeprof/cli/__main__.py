"""``python -m edgeprof.cli``: the ``edgeprof`` script."""

from edgeprof.__main__ import main

main()
