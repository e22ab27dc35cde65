"""Text of a decoding row for `prd-jax serve`: stop strings checked at every decode chunk and
the streamed text deltas.

- `StopStrings(stops, decode, min_tokens)` is a row's `stop_check`: after each chunk it looks
  for a stop string in the text of the tokens past `min_tokens` (vLLM checks stop strings
  only after `min_tokens`), near the fresh tokens only, and returns how many tokens to keep:
  the fewest whose text holds the stop string. The row then ends at once (its slot is freed),
  and `usage` counts exactly the tokens kept. `text(ids)` is their text cut before the stop.
- `Deltas(decode, hold)` turns a growing token list into text deltas: text is held back while
  it ends in an unfinished UTF-8 sequence (U+FFFD) or in the last `hold` characters (a stop
  string may be starting there), so the deltas joined equal the final text.
"""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence

Decode = Callable[[List[int]], str]


class StopStrings:
    def __init__(self, stops: Sequence[str], decode: Decode, min_tokens: int = 0):
        self.stops, self.decode, self.min_tokens = list(stops), decode, min_tokens
        self.lookback = max(len(s) for s in self.stops) + 8  # tokens: each decodes to >= 1 char, or a byte of one

    def _find(self, text: str) -> int:
        at = [text.find(s) for s in self.stops if s in text]
        return min(at) if at else -1

    def __call__(self, ids: List[int], fresh: int) -> Optional[int]:
        lo = max(self.min_tokens, fresh - self.lookback)
        if len(ids) <= self.min_tokens or self._find(self.decode(ids[lo:])) < 0:
            return None
        for keep in range(max(lo, self.min_tokens) + 1, len(ids) + 1):
            if self._find(self.decode(ids[lo:keep])) >= 0:
                return keep
        return None

    def text(self, ids: List[int], hit: bool) -> str:
        """The returned text of `ids`: cut before the first stop string past `min_tokens` when `hit`."""
        full = self.decode(ids)
        if not hit:
            return full
        head = len(self.decode(ids[:self.min_tokens]))
        at = self._find(full[head:])
        return full if at < 0 else full[:head + at]


class Deltas:
    def __init__(self, decode: Decode, hold: int = 0):
        self.decode, self.hold, self.sent = decode, hold, 0

    def __call__(self, ids: List[int], final: Optional[str] = None) -> str:
        """The text past what was sent; `final`: the row's returned text (all of it goes out)."""
        if final is not None:
            out, self.sent = final[self.sent:], len(final)
            return out
        text = self.decode(ids)
        end = len(text) - self.hold
        while end > self.sent and text[end - 1] == "\ufffd":
            end -= 1
        if end <= self.sent:
            return ""
        out, self.sent = text[self.sent:end], end
        return out
