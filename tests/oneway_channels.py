"""Two ends of one agent connection taken through the handshake in memory (no sockets)."""

from __future__ import annotations

from typing import Any

from tacit.oneway_latency.agent import AgentParams
from tacit.oneway_latency.protocol import Channel, Role

KEY = b"shared secret"
CONFIG = AgentParams().config()


def handshake(a: Channel, b: Channel) -> list[bytes]:
    """Connector ``a`` (the sender) and listener ``b`` prove the key to each other; the frames
    they sent, in order (hello, challenge, proof)."""
    frames = [a.hello(Role.SENDER)]
    b.accept_hello(b.decode(frames[0]), Role.SENDER)
    frames.append(b.challenge(Role.RECEIVER))
    a.accept_challenge(a.decode(frames[1]), Role.RECEIVER)
    frames.append(a.proof())
    b.accept_proof(b.decode(frames[2]))
    return frames


def connected(
    config_a: dict[str, Any] = CONFIG, config_b: dict[str, Any] = CONFIG, key_b: bytes = KEY
) -> tuple[Channel, Channel]:
    """A connector and a listener that have authenticated each other and agreed on their
    configurations (:class:`ConfigMismatchError` from the listener when they differ)."""
    a, b = Channel(KEY, connector=True, peer="b"), Channel(key_b, connector=False, peer="a")
    handshake(a, b)
    b.accept_config(b.decode(a.config_frame(config_a)), config_b)
    a.accept_config(a.decode(b.config_frame(config_b)), config_a)
    return a, b
