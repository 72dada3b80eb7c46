"""One crossing point per asyncio event loop, and the process-life hooks.

Each running loop gets a ``_native.Bridge``: the runtime queues finished calls there and wakes
the loop through a socket it watches; the loop resolves every queued future in one callback.
The runtime is shut down by ``atexit`` (in-flight calls dropped, threads joined) before the
interpreter finalizes, and a forked child starts its own runtime on first use.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import weakref
from typing import Any, Callable

from . import _native

_bridges: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _native.Bridge]" = (
    weakref.WeakKeyDictionary()
)


def _bridge(loop: asyncio.AbstractEventLoop) -> "_native.Bridge":
    bridge = _native.Bridge()
    loop.add_reader(bridge.fileno(), bridge.drain)
    _bridges[loop] = bridge
    return bridge


def submit(method: Callable[..., None], *args: Any) -> "asyncio.Future[Any]":
    """Start a runtime call; the returned future (of the running loop) gets its result.

    Cancelling the future cancels the governed call and releases everything it held.
    """
    loop = asyncio.get_running_loop()
    bridge = _bridges.get(loop) or _bridge(loop)
    future = loop.create_future()
    method(bridge, future, *args)
    return future


def _forget_parent_loops() -> None:
    # The parent's bridges (and their sockets) belong to the parent's loops and runtime.
    _bridges.clear()


os.register_at_fork(after_in_child=_forget_parent_loops)
atexit.register(_native._shutdown)
