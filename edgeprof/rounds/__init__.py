"""The rounds of a run, and their shared set-up: the in-process federation and its loop (``simulate``), the one
runtime factory (``runtime``), sweeps, training and the evaluation protocols. (Named for the step
of the flow: ``edgeprof.run`` is the public function that runs a config.)"""
