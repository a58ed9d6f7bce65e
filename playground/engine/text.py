"""Incremental detokenisation: the one place streamed token ids become text (provenance, server, CLI).

vLLM's prefix/read-offset scheme: each new token's text is the difference between decoding a short window with and
without it, so spacing rules that depend on the previous token stay right, and a token whose bytes end inside a
multi-byte character contributes no text until the character is complete.
"""

from __future__ import annotations

from collections.abc import Callable

REPLACEMENT_CHAR = "\ufffd"
MAX_PENDING_TOKENS = 4  # a UTF-8 character has at most 4 bytes; longer invalid runs are shown as U+FFFD


class IncrementalDecoder:
    """Decodes one token id at a time without splitting multi-byte characters."""

    def __init__(self, decode: Callable[[list[int]], str]) -> None:
        self._decode = decode
        self._ids: list[int] = []
        self._prefix_offset = 0  # start of the window decoded for context (keeps spacing rules right)
        self._read_offset = 0  # tokens before this have had their text handed out

    def push(self, token_id: int) -> str:
        """Add a token; returns the new text it completes ("" if its character is not finished yet)."""
        self._ids.append(token_id)
        if self._pending_is_partial() and len(self._ids) - self._read_offset < MAX_PENDING_TOKENS:
            return ""
        return self._take()

    def flush(self) -> str:
        """Text still held back at the end of the stream, less the unfinished character it ends with.

        Text is only held back while it ends in U+FFFD: a character whose bytes were cut short (by the token budget,
        say). Its U+FFFD (one, or one per byte with byte-fallback tokenizers) is dropped, so half an emoji shows
        nothing, as in vLLM, which never hands out text that ends in U+FFFD; any text before it is kept. From text
        alone, invalid bytes at the very end cannot be told from a cut character, so they are dropped too; invalid
        bytes anywhere else still show as U+FFFD."""
        if len(self._ids) <= self._read_offset:
            return ""
        return self._take().rstrip(REPLACEMENT_CHAR)

    def _pending_is_partial(self) -> bool:
        return self._decode(self._ids[self._prefix_offset :]).endswith(REPLACEMENT_CHAR)

    def _take(self) -> str:
        before = self._decode(self._ids[self._prefix_offset : self._read_offset])
        after = self._decode(self._ids[self._prefix_offset :])
        self._prefix_offset, self._read_offset = self._read_offset, len(self._ids)
        return after[len(before) :]

    def extend(self, token_ids: list[int]) -> str:
        """Add one step's tokens; returns the text they complete."""
        return "".join(self.push(t) for t in token_ids)
