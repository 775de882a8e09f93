"""Server-sent events, as OpenAI's streaming clients read them: a `data: {json}` event per chunk, then
`data: [DONE]`.

The gateway decodes in batches, so a streamed answer is whole (and recorded in the feedback log) before its first
chunk is sent: streaming changes how it arrives, split into the recipe's tokens, not when decoding ends.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from fastapi.responses import StreamingResponse

MEDIA_TYPE = "text/event-stream"
DONE = b"data: [DONE]\n\n"


def events(chunks: Iterable[dict]) -> StreamingResponse:
    """The chunks as an event stream (no proxy buffering: each event is passed on as it is written)."""

    async def stream():  # async: a plain generator would cost a thread hop per chunk
        for chunk in chunks:
            yield b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"
        yield DONE

    return StreamingResponse(stream(), media_type=MEDIA_TYPE,
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
