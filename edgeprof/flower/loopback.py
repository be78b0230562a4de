"""Ports for a Flower deployment on this machine's loopback (127.0.0.1), as the tests and benchmarks start one.

Standard library only, so importing it needs neither Flower nor torch.
"""

from __future__ import annotations

import socket
import time

HOST = "127.0.0.1"


def free_ports(n: int) -> list[int]:
    """``n`` distinct TCP ports free on the loopback right now (held together while chosen, then released)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind((HOST, 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def wait_for_port(port: int, timeout: float) -> None:
    """Return once something accepts connections on the loopback ``port``; TimeoutError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex((HOST, port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on {HOST}:{port}")
