"""Helpers for tests that start `mimo serve` on loopback."""
import socket


def free_port() -> int:
    """A port no one listens on right now (the server binds it a moment later)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
