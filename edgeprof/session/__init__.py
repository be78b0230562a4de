"""A run's set-up, which the drivers own: the meters, the idle baseline, the carbon intensity, the profiler and its
tracer, the report's CSV and sidecar (``run.py``: :func:`~edgeprof.session.run.open_run`, for ``measure``,
``train``, ``sweep`` and the Flower server), and the driver of your own code, :func:`edgeprof.monitor`
(``monitoring.py``, its settings and results in ``measurement.py``, its row labels in ``row_labels.py``).

It sits above both ``measure/`` (the sampler and the window engine, which return plain results) and ``report/``
(which reads those results and writes files): it imports the two, and neither imports it."""
