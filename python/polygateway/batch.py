"""``client.run_batch(items)``: a batch job (the runtime's ``Gateway::batch``, what
``polygateway batch`` runs) as an async iterator of ``BatchResult``.

Items are OpenAI Batch API input lines (``{"custom_id", "method", "url", "body"}``) or the plain
form (``{"custom_id", "messages", …}``), as dicts or JSON strings, from any iterable or async
iterable. They are handed to the runtime as they are read, with backpressure: a generator of a
million items is never held in memory. With ``journal=``, each finished item is recorded in that
SQLite file and a run with the same journal replays those instead of sending them again.
"""

from __future__ import annotations

import asyncio
import collections
import json
import math
from typing import Any, AsyncIterable, Deque, Iterable, Mapping, Optional, Tuple, Union

from ._bridge import submit
from .structured import schema_call
from .types import BatchProgress, BatchResult

__all__ = ["BatchRun", "BatchItems"]

BatchItems = Union[Iterable[Any], AsyncIterable[Any]]

# Lines handed to the runtime per crossing (from a plain iterable; an async iterable's items are
# handed over one by one, so a slow producer never holds back items it already produced).
_CHUNK = 256


def _line(item: Any) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, bytes):
        return item.decode("utf-8")
    if isinstance(item, Mapping):
        try:
            return json.dumps(dict(item), ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"batch item is not JSON-serialisable: {exc}") from None
    raise TypeError(
        "batch items must be dicts (OpenAI Batch API input lines or {'custom_id', 'messages'} "
        f"lines) or their JSON text, not {type(item).__name__}"
    )


def _schema_json(schema: Any) -> Optional[str]:
    if schema is None:
        return None
    if isinstance(schema, Mapping):
        return json.dumps(dict(schema))
    return schema_call(schema).schema_json


def start(native_client: Any, items: BatchItems, *, journal: Any, scope: Optional[str],
          max_concurrency: int, max_item_age_s: float, schema: Any) -> "BatchRun":
    """Validate the options and start the job (the client methods' body)."""
    if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int) \
            or max_concurrency < 1:
        raise ValueError(f"max_concurrency must be an int >= 1, not {max_concurrency!r}")
    if isinstance(max_item_age_s, bool) or not isinstance(max_item_age_s, (int, float)) \
            or not math.isfinite(max_item_age_s) or max_item_age_s < 0:
        raise ValueError(f"max_item_age_s must be a finite number >= 0, not {max_item_age_s!r}")
    if not (hasattr(items, "__aiter__") or hasattr(items, "__iter__")) \
            or isinstance(items, (str, bytes, Mapping)):
        raise TypeError("items must be an iterable or async iterable of batch lines (dicts)")
    native = native_client.batch(
        scope, _schema_json(schema), max_concurrency, float(max_item_age_s),
        None if journal is None else str(journal),
    )
    return BatchRun(native, items)


async def _feed(native: Any, items: BatchItems) -> None:
    """Hand the items to the job as they are read (waits while its input buffer is full)."""
    try:
        if hasattr(items, "__aiter__"):
            async for item in items:  # type: ignore[union-attr]
                if not await submit(native.feed, [_line(item)]):
                    return
        else:
            chunk = []
            for item in items:  # type: ignore[union-attr]
                chunk.append(_line(item))
                if len(chunk) >= _CHUNK:
                    if not await submit(native.feed, chunk):
                        return
                    chunk = []
            if chunk:
                await submit(native.feed, chunk)
    except BaseException:
        # Reading the items failed: nothing more can be admitted; the error is raised from the
        # iteration once the job has ended.
        native.cancel()
        raise
    finally:
        native.end_input()


class BatchRun:
    """A running batch job: ``async for result in run`` yields one ``BatchResult`` per item, in
    completion order, and ends when every item is answered (or after ``stop()``).

    Leaving the loop early, ``await run.aclose()`` or dropping it cancels the job; with a
    journal, running the same items again resumes it.
    """

    def __init__(self, native: Any, items: BatchItems) -> None:
        self._native = native
        self._items = items
        self._feeder: Optional["asyncio.Task[None]"] = None
        self._ready: Deque[Tuple[Any, ...]] = collections.deque()
        self._done = False

    def __aiter__(self) -> "BatchRun":
        return self

    async def __anext__(self) -> BatchResult:
        if self._feeder is None:
            # The feeder holds the native job and the items, not this object: dropping an
            # unfinished run still reaches __del__, which cancels the job (and so the feeder).
            self._feeder = asyncio.ensure_future(_feed(self._native, self._items))
        while not self._ready:
            if self._done:
                raise StopAsyncIteration
            batch = await submit(self._native.next_results)
            if batch is None:
                self._done = True
                await self._feeder  # the items' own error, if reading them failed
                raise StopAsyncIteration
            self._ready.extend(batch)
        return BatchResult(*self._ready.popleft())

    def progress(self) -> BatchProgress:
        """What the job has done so far (refreshed by the runtime several times a second)."""
        return BatchProgress(**self._native.progress())

    def stop(self) -> None:
        """Stop admitting items: calls in flight finish and their results still arrive; the
        rest is left for a later run with the same journal. The iteration then ends."""
        self._native.stop()

    @property
    def stopped(self) -> bool:
        """The job ended before the end of its items (``stop()``, ``aclose()``, or a journal
        failure): the results are incomplete; the same journal resumes it."""
        outcome = self._native.outcome()
        return outcome is not None and outcome[0]

    @property
    def failure(self) -> Optional[str]:
        """The journal failure that stopped the job, if one did."""
        outcome = self._native.outcome()
        return None if outcome is None else outcome[1]

    async def aclose(self) -> None:
        """Cancel the job: no new items, calls in flight dropped (idempotent)."""
        self._native.cancel()
        if self._feeder is not None and not self._feeder.done():
            self._feeder.cancel()

    def __del__(self) -> None:
        try:
            self._native.cancel()
        except Exception:
            pass
