"""Measurement: the sampling profiler, the one window engine (``windows``), the monitor API for your own code
(``monitoring``) and row labels."""
