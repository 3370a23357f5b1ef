"""What the Python agent loops share: the SDKs' own retry count and a turn
sent again when its answer broke off mid-stream.

HALE_CLIENT_RETRIES: the SDKs' own retries (default 0: the healing is
hale's; hale-bench chaos-hour's scale-out mode keeps the SDKs' default, 2).
"""

import os

RETRIES = int(os.environ.get("HALE_CLIENT_RETRIES", "0"))


def _transport_errors() -> tuple:
    """The SDKs' HTTP client's transport errors: httpx2 in their newer
    releases, httpx before (google-genai takes either)."""
    found = []
    for name in ("httpx2", "httpx"):
        try:
            found.append(__import__(name).TransportError)
        except ImportError:
            pass
    return tuple(found)


# A stream broken off mid-answer, as each HTTP client raises it.
TRANSPORT_ERRORS = _transport_errors()


def resent_when_cut(send, cut: tuple):
    """`send()`, sent again when it raised one of `cut` (its stream broke off
    mid-answer: the instance serving it killed, in the scale-out mode) while
    the SDK's retries are on: the SDK retries a request that got no answer,
    an agent framework the turn whose answer broke off. With retries off the
    cut is the failure."""
    for attempt in range(RETRIES + 1):
        try:
            return send()
        except cut:
            if attempt == RETRIES:
                raise
