"""A stock-style Flower app profiled by edgeprof: see client_app.py and server_app.py."""
